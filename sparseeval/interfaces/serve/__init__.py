"""Served mode (``make serve``): the pipeline as long-lived services, run by supervisord.

Postgres, the MLflow tracking server, the Dagster code server, the webserver and the daemon run as
separate processes on 127.0.0.1, the way a multi-node deployment runs them (``docs/deploy.md``;
``docs/deploy/docker-compose.yml`` is the same layout as containers). The project's own code is a
bootstrap of what only it knows (:mod:`.bootstrap`: the Postgres cluster, its role and databases,
the secrets, the instance config, each service's command and environment), and the drain of
in-flight runs on stop (:mod:`.drain`). Starting, restarting a service that dies, stopping and
status are supervisord's (:mod:`.supervisor`): ``supervisorctl -c <data>/serve/supervisord.conf
status|restart NAME|tail -f NAME`` work as on any supervisord.

Secrets: the database password is generated into ``<data>/serve/secrets/`` (mode 0600) or read from
``DAGSTER_PG_PASSWORD`` / ``DAGSTER_PG_PASSWORD_FILE``; it reaches Dagster through the environment
(``{env: DAGSTER_PG_PASSWORD}``) and MLflow through a libpq passfile (``PGPASSFILE``), never through
a command line, a config file or a log line. Every service binds 127.0.0.1; ``--mlflow-host``
exposes MLflow only with its basic-auth app.

Nothing here imports Dagster: the bootstrap starts Dagster's executables and talks to the webserver
over HTTP.
"""
