-- Analyst views over the sparseeval store (CREATE OR REPLACE, applied after schema.sql).

CREATE OR REPLACE VIEW benchmark_coverage AS
WITH r AS (
    SELECT benchmark, count(DISTINCT model) AS models, count(DISTINCT item_id) AS items,
           count(*) AS responses
    FROM responses GROUP BY benchmark
), s AS (
    SELECT benchmark, count(*) AS models_with_scores FROM scores GROUP BY benchmark
)
SELECT coalesce(r.benchmark, s.benchmark) AS benchmark,
       coalesce(r.models, 0) AS models,
       coalesce(r.items, 0) AS items,
       coalesce(r.responses, 0) AS responses,
       CASE WHEN coalesce(r.models, 0) * coalesce(r.items, 0) = 0 THEN 0.0
            ELSE r.responses / (r.models * r.items)::DOUBLE END AS density,
       coalesce(s.models_with_scores, 0) AS models_with_scores
FROM r FULL OUTER JOIN s ON r.benchmark = s.benchmark
ORDER BY benchmark;

-- The anchors users run: the published champion of each benchmark, in predictor input order.
-- The joint predictor (benchmark 'sparseeval-joint') spans several: item_benchmark is each anchor's own.
CREATE OR REPLACE VIEW latest_anchors AS
SELECT n.benchmark, n.anchor_set_id, n.method, n.k, n.seed, n.created_at, n.published_at,
       a.position, a.item_id, a.weight, a.benchmark AS item_benchmark
FROM anchor_sets n JOIN anchors a ON a.anchor_set_id = n.anchor_set_id
WHERE n.role = 'champion'
ORDER BY n.benchmark, a.position;

-- Every anchor set with its lifecycle and scores: champion / challenger history per benchmark.
CREATE OR REPLACE VIEW anchor_set_history AS
SELECT benchmark, anchor_set_id, role, reason, origin, method, k, seed, data_version, n_train_models,
       test_mae, baseline_mae, coverage, registry_version, created_at, published_at
FROM anchor_sets
ORDER BY benchmark, created_at, anchor_set_id;

CREATE OR REPLACE VIEW evaluation_summary AS
SELECT benchmark, method, k,
       count(DISTINCT seed) AS n_seeds,
       count(*) AS n_runs,
       avg(mae) AS mae_mean, stddev_samp(mae) AS mae_sd,
       avg(tau) AS tau_mean, stddev_samp(tau) AS tau_sd,
       avg(rho) AS rho_mean, stddev_samp(rho) AS rho_sd,
       avg(max_error) AS max_error_mean,
       avg(seconds) AS seconds_mean, stddev_samp(seconds) AS seconds_sd
FROM evaluations
GROUP BY benchmark, method, k
ORDER BY benchmark, k, method;

CREATE OR REPLACE VIEW method_ranking AS
SELECT benchmark, k, method, n_seeds, mae_mean, mae_sd, tau_mean,
       rank() OVER (PARTITION BY benchmark, k ORDER BY mae_mean ASC NULLS LAST) AS rank
FROM evaluation_summary
ORDER BY benchmark, k, rank, method;

CREATE OR REPLACE VIEW predictions_vs_truth AS
SELECT p.model, p.benchmark, p.anchor_set_id, p.predicted, p.lower, p.upper, p.ood, p.ood_reason, p.warnings,
       s.score AS true_score,
       p.predicted - s.score AS error,
       abs(p.predicted - s.score) AS abs_error,
       CASE WHEN p.lower IS NULL OR p.upper IS NULL THEN NULL
            ELSE s.score BETWEEN p.lower AND p.upper END AS inside_interval
FROM predictions p JOIN scores s ON s.model = p.model AND s.benchmark = p.benchmark
ORDER BY p.benchmark, p.model;

-- How each fitted anchor set fares on models stronger than every model it learned from (its frontier
-- self-check) beside its in-distribution figures, newest first: the silent misses (outside the interval
-- and not flagged) are what the frontier_misses_flagged publishing check bounds. With a probe (the
-- default, SPARSEEVAL_PROBE_ITEMS) the figures are the two stages': each stronger model the anchors place at
-- the top answers its probe as `sparseeval next` asks; probe_items is its first batch, probed the share
-- estimated by the probe, probe_items_mean the items they ran, frontier_silent_anchors_alone what the same
-- fit missed silently from its anchors alone.
CREATE OR REPLACE VIEW frontier_selfcheck AS
SELECT benchmark, anchor_set_id, method, k, role, created_at,
       test_mae, coverage,
       frontier_mae, frontier_bias, frontier_coverage, frontier_flagged, frontier_silent, frontier_models,
       frontier_mae / nullif(test_mae, 0) AS frontier_mae_ratio,
       json_extract(checks, '$.frontier_misses_flagged.passed')::BOOLEAN AS frontier_check_passed,
       json_extract(params, '$.frontier.probe_items')::INTEGER AS probe_items,
       json_extract(params, '$.frontier.probed')::DOUBLE AS probed,
       json_extract(params, '$.frontier.probe_items_mean')::DOUBLE AS probe_items_mean,
       json_extract(params, '$.frontier.anchors_alone.silent_misses')::DOUBLE AS frontier_silent_anchors_alone
FROM anchor_sets
WHERE frontier_mae IS NOT NULL
ORDER BY benchmark, created_at DESC, anchor_set_id DESC;

-- The joint predictor's frontier self-check output by output and cut by cut (cut_on): 'mean', refitted below
-- the 90th percentile of its fitting models' mean score and scored on the stronger rest, every output
-- (sparseeval.estimate.evaluation.joint_frontier_selfcheck); a benchmark's name, refitted below that benchmark's own
-- 90th percentile, that output only (joint_own_cut_selfcheck). Newest first; frontier_selfcheck above shows
-- the mean output's 'mean' row. Every row must pass the publishing check.
CREATE OR REPLACE VIEW joint_frontier_selfcheck AS
WITH cuts AS (
    SELECT a.anchor_set_id, a.role, a.created_at, a.checks, o.output, 'mean' AS cut_on,
           json_extract(a.params, '$.frontier.outputs."' || o.output || '"') AS f
    FROM anchor_sets a, unnest(json_keys(a.params, '$.frontier.outputs')) AS o(output)
    WHERE a.benchmark = 'sparseeval-joint'
    UNION ALL
    SELECT a.anchor_set_id, a.role, a.created_at, a.checks, o.output, o.output AS cut_on,
           json_extract(a.params, '$.frontier.own_cut."' || o.output || '"') AS f
    FROM anchor_sets a, unnest(json_keys(a.params, '$.frontier.own_cut')) AS o(output)
    WHERE a.benchmark = 'sparseeval-joint'
)
SELECT anchor_set_id, role, created_at, output, cut_on,
       json_extract(f, '$.mae')::DOUBLE AS frontier_mae,
       json_extract(f, '$.bias')::DOUBLE AS frontier_bias,
       json_extract(f, '$.coverage')::DOUBLE AS frontier_coverage,
       json_extract(f, '$.flagged')::DOUBLE AS frontier_flagged,
       json_extract(f, '$.silent_misses')::DOUBLE AS frontier_silent,
       json_extract(f, '$.n')::INTEGER AS frontier_models,
       json_extract_string(f, '$.note') AS note,
       json_extract(checks, '$.frontier_misses_flagged.passed')::BOOLEAN AS frontier_check_passed
FROM cuts
ORDER BY created_at DESC, anchor_set_id DESC, cut_on = 'mean' DESC, output;

-- Every role change of every anchor set, oldest first (append-only): why a set became what it is.
CREATE OR REPLACE VIEW role_history AS
SELECT benchmark, anchor_set_id, old_role, new_role, reason, changed_at
FROM role_changes
ORDER BY changed_at, anchor_set_id;

-- Every publication under an MLflow alias and how far it got (a step other than done / abandoned
-- is resumed by the next publication of that benchmark).
CREATE OR REPLACE VIEW publication_history AS
SELECT publication_id, benchmark, anchor_set_id, alias, step, registry_version, content_hash, reason,
       created_at, finished_at
FROM publications
ORDER BY publication_id;
