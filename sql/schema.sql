-- sparseeval store: DuckDB DDL, applied idempotently by sparseeval.data.store.Store.apply_schema.
-- Keys are the natural keys of the data, so re-ingesting the same rows changes nothing.
-- Scores are CHECKed to [0, 1] here as a last line of defence behind sparseeval.data.validation.

-- Layout version of this file; a store written by another layout is refused with a clear message.
CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
INSERT INTO store_meta VALUES ('schema_version', '2') ON CONFLICT DO NOTHING;

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

-- One row per ingested unit (a file or a run folder), per attempt: what was read, refused,
-- skipped, and why. 'partial' = stored, but some parts of the unit were refused (see reason).
-- 'interrupted' = stopped by Ctrl-C before it committed (nothing of it stored).
CREATE TABLE IF NOT EXISTS ingests (
    ingest_id   BIGINT PRIMARY KEY DEFAULT nextval('ingest_id_seq'),
    file        VARCHAR NOT NULL,        -- the path as given
    source_key  VARCHAR,                 -- its resolved absolute path: "the same file" across ingests
    sha256      VARCHAR NOT NULL,        -- of the bytes actually read (the store's pinned copy)
    format      VARCHAR,
    status      VARCHAR NOT NULL CHECK (status IN ('ok', 'refused', 'partial', 'skipped', 'interrupted')),
    reason      VARCHAR,
    n_responses BIGINT DEFAULT 0,
    n_scores    BIGINT DEFAULT 0,
    n_superseded BIGINT DEFAULT 0,       -- earlier runs this ingest replaced as current
    started_at  TIMESTAMP,
    finished_at TIMESTAMP
);

-- Parts of a unit not stored (refused) or deliberately not read (skipped), with the reason, and
-- warnings about what was stored (a model name that differs from another only by case).
CREATE TABLE IF NOT EXISTS ingest_notes (
    ingest_id BIGINT NOT NULL,
    part      VARCHAR NOT NULL,
    status    VARCHAR NOT NULL CHECK (status IN ('refused', 'skipped', 'warning')),
    reason    VARCHAR
);

CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1;

-- A run: the responses (kind 'responses') or the reported score (kind 'score') of one model on one
-- benchmark (variant: 'arc', 'arc@0shot') from one ingest, with the evaluation settings they were
-- produced under. Exactly the runs with superseded_in IS NULL are current; a newer run of the same
-- (model, benchmark, kind), or a changed version of the same source file, supersedes older ones.
-- Superseded runs and their rows are kept (history), never deleted.
CREATE TABLE IF NOT EXISTS runs (
    run_id          BIGINT PRIMARY KEY,
    ingest_id       BIGINT NOT NULL,
    model           VARCHAR NOT NULL,
    benchmark       VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL CHECK (kind IN ('responses', 'score')),
    task            VARCHAR,             -- the task name as run (arc_challenge, leaderboard_bbh_navigate)
    n_shot          INTEGER,
    metric          VARCHAR,
    filter          VARCHAR,
    harness         VARCHAR,
    harness_version VARCHAR,
    "limit"         DOUBLE,              -- the harness' --limit; never set on a 'score' run
    run_at          TIMESTAMP,           -- the run's own time, as the harness wrote it
    score           DOUBLE CHECK (score >= 0 AND score <= 1),  -- the reported score, kind 'score'
    n_rows          BIGINT,              -- responses stored under this run
    superseded_in   BIGINT,              -- the ingest that replaced it (NULL: current)
    superseded_by   BIGINT,              -- the run that replaced it, if one did (a changed file may just drop it)
    superseded_at   TIMESTAMP,
    CHECK (kind = 'responses' OR (score IS NOT NULL AND "limit" IS NULL))
);

-- Every per-item result ever ingested (current and superseded). Key of the current rows:
-- (model, benchmark, item_id), enforced by the store's ingest (duplicates within a file are refused
-- by validation, rows already current are skipped by an anti-join), not by a PRIMARY KEY: DuckDB's
-- ART index on three VARCHARs costs ~16x the table itself and would not fit the full leaderboard.
CREATE TABLE IF NOT EXISTS response_rows (
    model     VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    item_id   VARCHAR NOT NULL,
    score     DOUBLE NOT NULL CHECK (score >= 0 AND score <= 1),
    run_id    BIGINT NOT NULL
);

-- The current values: what every reader of the store (matrix, views, analysts) sees.
CREATE OR REPLACE VIEW current_runs AS SELECT * FROM runs WHERE superseded_in IS NULL;

CREATE OR REPLACE VIEW responses AS
SELECT r.model, r.benchmark, r.item_id, r.score, r.run_id
FROM response_rows r
WHERE r.run_id IN (SELECT run_id FROM runs WHERE kind = 'responses' AND superseded_in IS NULL);

CREATE OR REPLACE VIEW scores AS
SELECT model, benchmark, score, run_id FROM runs WHERE kind = 'score' AND superseded_in IS NULL;

-- History: every stored response with its run's settings and whether it is still current.
CREATE OR REPLACE VIEW response_history AS
SELECT r.model, r.benchmark, r.item_id, r.score, r.run_id, u.ingest_id, u.run_at, u.task, u.n_shot,
       u.metric, u.filter, u."limit", u.superseded_in IS NULL AS is_current, u.superseded_by, u.superseded_in
FROM response_rows r JOIN runs u USING (run_id);

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
    artifact_uri   VARCHAR,              -- the predictor version folder fitted on these anchors
    -- lifecycle (sparseeval/data/lifecycle.py holds the table of allowed changes; every change is also
    -- appended to role_changes): 'candidate' (fitted, checks not decided), 'proposed' (passed the
    -- checks, publication pending in publications), 'champion' (published; one per benchmark),
    -- 'challenger' (published under the alias challenger, for comparison only), 'retired' (was
    -- published or proposed; replaced or abandoned), 'rejected' (failed a publishing check)
    role           VARCHAR DEFAULT 'candidate',
    origin         VARCHAR,              -- 'selected' (new anchors) or 'refit' (champion's anchors, refit)
    data_version   VARCHAR,              -- the benchmark's data version it was fitted on
    test_mae       DOUBLE,               -- points, on the held-out models of its split
    baseline_mae   DOUBLE,               -- random-linear on the same split (the publishing bar)
    coverage       DOUBLE,               -- interval coverage on the held-out models
    registry_version VARCHAR,            -- MLflow registered model version
    published_at   TIMESTAMP
);

-- Added in place (stores of this layout from before keep working): why the set has its role, and
-- the fit key (hash of data version and every setting that changes the fit) it was fitted under.
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS reason VARCHAR;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS fit_key VARCHAR;
-- the publishing checks' outcomes (JSON: name -> {passed, ...}), written with the decision
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS checks VARCHAR;
-- the frontier self-check (sparseeval.estimate.evaluation.frontier_selfcheck): the set's method refitted on the
-- weakest 90 % of its own fitting models and scored on the strongest 10 % (models stronger than every
-- model it learned from): MAE and bias (points), interval coverage, share flagged, share outside the
-- interval and not flagged (the silent misses the publishing check bounds), and how many models
-- (the joint predictor's: its mean output's, with the cut on the mean score; every output's figures are in
-- params' frontier.outputs, each benchmark output's with the cut on its own score in frontier.own_cut, view
-- joint_frontier_selfcheck)
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_mae DOUBLE;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_bias DOUBLE;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_coverage DOUBLE;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_flagged DOUBLE;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_silent DOUBLE;
ALTER TABLE anchor_sets ADD COLUMN IF NOT EXISTS frontier_models INTEGER;

-- Append-only: every role change of an anchor set, with its reason (the history of the lifecycle).
CREATE TABLE IF NOT EXISTS role_changes (
    anchor_set_id BIGINT NOT NULL,
    benchmark     VARCHAR NOT NULL,
    old_role      VARCHAR,               -- NULL when the set was created
    new_role      VARCHAR NOT NULL,
    reason        VARCHAR,
    changed_at    TIMESTAMP NOT NULL
);

CREATE SEQUENCE IF NOT EXISTS publication_id_seq START 1;
-- One row per publication of an anchor set under an MLflow alias (sparseeval/publish/publishing.py, its only
-- writer): the intent is written first, each step is recorded as it completes, so a publication cut
-- short anywhere is resumed by the next one and converges (step: intent -> registered -> swapped ->
-- done, or abandoned with a reason).
CREATE TABLE IF NOT EXISTS publications (
    publication_id   BIGINT PRIMARY KEY DEFAULT nextval('publication_id_seq'),
    benchmark        VARCHAR NOT NULL,
    anchor_set_id    BIGINT NOT NULL,
    alias            VARCHAR NOT NULL,   -- 'champion' or 'challenger'
    content_hash     VARCHAR NOT NULL,   -- the predictor's content hash (MLflow version tag, folder)
    fit_key          VARCHAR,            -- the fit key of the refresh that proposed it
    step             VARCHAR NOT NULL,
    registry_version VARCHAR,
    mlflow_run_id    VARCHAR,
    reason           VARCHAR,
    created_at       TIMESTAMP NOT NULL,
    finished_at      TIMESTAMP
);

-- Append-only: what each refresh decided for a fit key (published, rejected, reproduced...). A fit
-- key whose latest decision is here is up to date: a refresh with that key skips.
CREATE TABLE IF NOT EXISTS fit_decisions (
    benchmark     VARCHAR NOT NULL,
    fit_key       VARCHAR NOT NULL,
    data_version  VARCHAR,
    outcome       VARCHAR NOT NULL,      -- 'published', 'rejected', 'unchanged'
    anchor_set_id BIGINT,
    reason        VARCHAR,
    decided_at    TIMESTAMP NOT NULL
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
    mlflow_run_id VARCHAR,
    data_version  VARCHAR               -- the benchmark's data version the comparison ran on
);
-- the comparison's key: data version and every comparison setting (a changed setting compares again)
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS run_key VARCHAR;

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
-- why a prediction is flagged, in words ("stronger than every training model (...)"; reasons joined by
-- " | "), NULL when it is not
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS ood_reason VARCHAR;
-- what `predict` would print under the prediction, joined by " | " (a self-check's "may be too low" above
-- its failed cut, the probe's "answer the first 40 items of its probe" at its level, ...), NULL when nothing
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS warnings VARCHAR;
-- which stage gave the number: 'anchors' (the anchors' conformal estimate) or 'probe' (the design-based
-- estimate of the model's random probe, sparseeval/estimate/probe.py); the probe items it used and still asks for;
-- the anchors' own estimate beside a probe's
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS stage VARCHAR DEFAULT 'anchors';
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS probe_items INTEGER DEFAULT 0;
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS probe_next INTEGER DEFAULT 0;
ALTER TABLE predictions ADD COLUMN IF NOT EXISTS anchors_predicted DOUBLE;

-- Hugging Face Hub dataset repos (sparseeval.data.hub_sources): per repo and requested revision, the commit
-- sha last ingested, so an unchanged repo costs one metadata call; and per file the blob id ingested,
-- so a new revision downloads only the files that are new or changed.
CREATE TABLE IF NOT EXISTS hub_revisions (
    repo        VARCHAR NOT NULL,       -- ORG/REPO (a dataset repo)
    revision    VARCHAR NOT NULL,       -- what the source asked for: a branch, tag or sha ('main' by default)
    sha         VARCHAR NOT NULL,       -- the commit it resolved to and was ingested at
    files       INTEGER,                -- files downloaded for that commit
    bytes       BIGINT,
    seconds     DOUBLE,
    ingested_at TIMESTAMP,
    PRIMARY KEY (repo, revision)
);
-- the wanted tasks (SPARSEEVAL_HUB_TASKS) the commit was fetched for; '' or NULL (stores before it): every file
ALTER TABLE hub_revisions ADD COLUMN IF NOT EXISTS wanted VARCHAR;
CREATE TABLE IF NOT EXISTS hub_files (
    repo        VARCHAR NOT NULL,
    path        VARCHAR NOT NULL,       -- file path inside the repo
    blob_id     VARCHAR NOT NULL,       -- git blob id (changes with the content)
    sha         VARCHAR NOT NULL,       -- commit it was downloaded at
    size        BIGINT,
    PRIMARY KEY (repo, path, blob_id)
);
