-- sparseeval store: DuckDB DDL, applied idempotently by sparseeval.store.Store.apply_schema.
-- Keys are the natural keys of the data, so re-ingesting the same rows changes nothing.
-- Scores are CHECKed to [0, 1] here as a last line of defence behind sparseeval.validation.

CREATE SEQUENCE IF NOT EXISTS ingest_id_seq START 1;
CREATE SEQUENCE IF NOT EXISTS anchor_set_id_seq START 1;
CREATE SEQUENCE IF NOT EXISTS evaluation_id_seq START 1;

CREATE TABLE IF NOT EXISTS models (
    model        VARCHAR PRIMARY KEY,
    family       VARCHAR,                -- organisation (text before '/'), for family splits
    submitted_at TIMESTAMP,
    n_params     DOUBLE,
    base_model   VARCHAR,
    first_seen   TIMESTAMP DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS items (
    benchmark VARCHAR NOT NULL,
    item_id   VARCHAR NOT NULL,
    PRIMARY KEY (benchmark, item_id)
);

CREATE TABLE IF NOT EXISTS ingests (
    ingest_id   BIGINT PRIMARY KEY DEFAULT nextval('ingest_id_seq'),
    file        VARCHAR NOT NULL,
    sha256      VARCHAR NOT NULL,
    format      VARCHAR,
    status      VARCHAR NOT NULL CHECK (status IN ('ok', 'refused', 'partial')),
    reason      VARCHAR,
    n_responses BIGINT DEFAULT 0,
    n_scores    BIGINT DEFAULT 0,
    started_at  TIMESTAMP,
    finished_at TIMESTAMP
);

-- Key (model, benchmark, item_id), enforced by the store's ingest (duplicates within a file are
-- refused by validation, rows already stored are skipped by an anti-join) and not by a PRIMARY KEY:
-- DuckDB's ART index on three VARCHARs costs ~16x the table itself (245 MB vs 15 MB for the 2.9 M
-- openllm_v1 rows) and 5x the insert time, and would not fit the full leaderboard (200 M cells).
CREATE TABLE IF NOT EXISTS responses (
    model     VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    item_id   VARCHAR NOT NULL,
    score     DOUBLE NOT NULL CHECK (score >= 0 AND score <= 1),
    ingest_id BIGINT
);

CREATE TABLE IF NOT EXISTS scores (
    model     VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    score     DOUBLE NOT NULL CHECK (score >= 0 AND score <= 1),
    ingest_id BIGINT,
    PRIMARY KEY (model, benchmark)
);

CREATE TABLE IF NOT EXISTS anchor_sets (
    anchor_set_id  BIGINT PRIMARY KEY DEFAULT nextval('anchor_set_id_seq'),
    benchmark      VARCHAR NOT NULL,
    method         VARCHAR NOT NULL,
    k              INTEGER NOT NULL,
    seed           BIGINT,
    created_at     TIMESTAMP DEFAULT current_timestamp,
    n_train_models INTEGER,
    params         VARCHAR,              -- JSON text of the estimator's parameters
    content_hash   VARCHAR,              -- sha256 of (benchmark, method, k, seed, items, weights)
    mlflow_run_id  VARCHAR,
    artifact_uri   VARCHAR
);

CREATE TABLE IF NOT EXISTS anchors (
    anchor_set_id BIGINT NOT NULL,
    position      INTEGER NOT NULL,
    benchmark     VARCHAR NOT NULL,
    item_id       VARCHAR NOT NULL,
    weight        DOUBLE,
    PRIMARY KEY (anchor_set_id, position)
);

CREATE TABLE IF NOT EXISTS evaluations (
    evaluation_id BIGINT PRIMARY KEY DEFAULT nextval('evaluation_id_seq'),
    benchmark     VARCHAR NOT NULL,
    method        VARCHAR NOT NULL,
    k             INTEGER NOT NULL,
    seed          BIGINT,
    split_policy  VARCHAR,
    mae           DOUBLE,
    tau           DOUBLE,
    rho           DOUBLE,
    max_error     DOUBLE,
    seconds       DOUBLE,
    n_train       INTEGER,
    n_val         INTEGER,
    n_test        INTEGER,
    created_at    TIMESTAMP DEFAULT current_timestamp,
    mlflow_run_id VARCHAR
);

CREATE TABLE IF NOT EXISTS predictions (
    model         VARCHAR NOT NULL,
    benchmark     VARCHAR NOT NULL,
    anchor_set_id BIGINT NOT NULL,
    predicted     DOUBLE NOT NULL,
    lower         DOUBLE,
    upper         DOUBLE,
    n_anchors     INTEGER,
    ood           BOOLEAN DEFAULT false,
    created_at    TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (model, benchmark, anchor_set_id)
);
