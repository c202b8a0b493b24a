-- Run once by the postgres image on an empty volume (as POSTGRES_USER, the owner of the `dagster`
-- database it creates): MLflow's backend store gets its own database beside Dagster's.
CREATE DATABASE mlflow;
