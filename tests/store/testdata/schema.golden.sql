-- v1: devices, templates, jobs, trials and entries
PRAGMA application_id = 1802794350;

CREATE TABLE devices (
  model_key         TEXT PRIMARY KEY NOT NULL,
  name              TEXT NOT NULL,
  cc_major          INTEGER NOT NULL,
  cc_minor          INTEGER NOT NULL,
  sm_count          INTEGER NOT NULL,
  l2_bytes          INTEGER NOT NULL,
  memory_bus_bits   INTEGER NOT NULL,
  memory_clock_khz  INTEGER NOT NULL,
  copy_gbps         REAL NOT NULL,
  uuid              TEXT NOT NULL,
  driver_version    TEXT NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);

CREATE TABLE templates (
  id                TEXT PRIMARY KEY NOT NULL,
  source_hash       TEXT NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);

-- AUTOINCREMENT: job and entry ids are shown to clients, so a deleted one is never reused.
CREATE TABLE jobs (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  device_model      TEXT NOT NULL,
  template_id       TEXT NOT NULL,
  dtype             TEXT NOT NULL,
  shape             TEXT NOT NULL,
  source_hash       TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  state             TEXT NOT NULL,
  done              INTEGER NOT NULL,
  total             INTEGER NOT NULL,
  created_unix_ms   INTEGER NOT NULL,
  updated_unix_ms   INTEGER NOT NULL
);
CREATE INDEX jobs_by_key ON jobs (device_model, template_id, dtype, shape);

CREATE TABLE trials (
  id                INTEGER PRIMARY KEY,
  job_id            INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  config            TEXT NOT NULL,
  candidate_hash    TEXT NOT NULL,
  outcome           TEXT NOT NULL,
  compile_ms        REAL NOT NULL,
  time_ns           REAL NOT NULL,
  spread_ns         REAL NOT NULL,
  repeats           INTEGER NOT NULL,
  registers         INTEGER NOT NULL,
  spill_bytes       INTEGER NOT NULL,
  static_smem       INTEGER NOT NULL,
  dynamic_smem      INTEGER NOT NULL,
  occupancy         REAL NOT NULL,
  waves             REAL NOT NULL,
  gbps              REAL NOT NULL,
  gflops            REAL NOT NULL,
  ceiling_fraction  REAL NOT NULL,
  log               TEXT NOT NULL,
  created_unix_ms   INTEGER NOT NULL
);
CREATE INDEX trials_by_job ON trials (job_id, id);

-- The winner per key. job_id outlives a pruned job as NULL: the winner stays usable.
CREATE TABLE entries (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  device_model      TEXT NOT NULL,
  template_id       TEXT NOT NULL,
  dtype             TEXT NOT NULL,
  shape             TEXT NOT NULL,
  source_hash       TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  config            TEXT NOT NULL,
  cubin             BLOB NOT NULL,
  cubin_sha256      TEXT NOT NULL,
  launches          TEXT NOT NULL,
  time_ns           REAL NOT NULL,
  spread_ns         REAL NOT NULL,
  repeats           INTEGER NOT NULL,
  registers         INTEGER NOT NULL,
  spill_bytes       INTEGER NOT NULL,
  static_smem       INTEGER NOT NULL,
  dynamic_smem      INTEGER NOT NULL,
  occupancy         REAL NOT NULL,
  waves             REAL NOT NULL,
  gbps              REAL NOT NULL,
  gflops            REAL NOT NULL,
  ceiling_fraction  REAL NOT NULL,
  job_id            INTEGER REFERENCES jobs (id) ON DELETE SET NULL,
  trials_total      INTEGER NOT NULL,
  trials_ok         INTEGER NOT NULL,
  created_unix_ms   INTEGER NOT NULL
);
CREATE UNIQUE INDEX entries_by_key ON entries (device_model, template_id, dtype, shape);
-- Deleting a job looks up its entries (ON DELETE SET NULL); without this, a table scan.
CREATE INDEX entries_by_job ON entries (job_id);

-- v2: jobs.strategy, jobs.error, jobs_by_state, entries.tuning_seconds
ALTER TABLE jobs ADD COLUMN strategy TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN error TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_by_state ON jobs (state, id);
ALTER TABLE entries ADD COLUMN tuning_seconds REAL NOT NULL DEFAULT 0;

-- v3: last_wave, batch and l2_flushed on trials and entries
ALTER TABLE trials ADD COLUMN last_wave REAL NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN l2_flushed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN last_wave REAL NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN l2_flushed INTEGER NOT NULL DEFAULT 0;

-- v4: entries.default_time_ns
ALTER TABLE entries ADD COLUMN default_time_ns REAL NOT NULL DEFAULT 0;

-- v5: entries_generation, moved by triggers on entries
CREATE TABLE entries_generation (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  value             INTEGER NOT NULL
);
INSERT INTO entries_generation (id, value) VALUES (1, 0);
CREATE TRIGGER entries_generation_on_insert AFTER INSERT ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER entries_generation_on_update AFTER UPDATE ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER entries_generation_on_delete AFTER DELETE ON entries
BEGIN UPDATE entries_generation SET value = value + 1 WHERE id = 1; END;

-- v6: jobs.stop_reason
ALTER TABLE jobs ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';

