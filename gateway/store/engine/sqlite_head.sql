-- The SQLite schema the alembic migrations build, rendered by
-- `python -m gateway.store.engine.db`. Do not edit.
-- alembic revision: 0013
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

CREATE TABLE jobs (
	id VARCHAR(26) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	raw_status VARCHAR(64), 
	model VARCHAR(255) NOT NULL, 
	version VARCHAR(64) NOT NULL, 
	deployment VARCHAR(255), 
	route VARCHAR(255) NOT NULL, 
	provider VARCHAR(64) NOT NULL, 
	provider_job_id VARCHAR(255), 
	input JSON NOT NULL, 
	output JSON, 
	logs TEXT, 
	error TEXT, 
	metrics JSON, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	submitted_at DATETIME, 
	started_at DATETIME, 
	completed_at DATETIME, 
	deadline DATETIME, 
	cancel_requested_at DATETIME, 
	cancel_sent_at DATETIME, 
	webhook TEXT, 
	webhook_events_filter JSON, 
	idempotency_key VARCHAR(255), 
	request_hash VARCHAR(64), 
	callback_token VARCHAR(64) NOT NULL, 
	next_attempt_at DATETIME, 
	attempts INTEGER DEFAULT '0' NOT NULL, 
	lease_owner VARCHAR(64), 
	leased_until DATETIME, 
	stream BOOLEAN DEFAULT 0 NOT NULL, 
	data_removed BOOLEAN DEFAULT 0 NOT NULL, lost_at DATETIME, owner VARCHAR(64), priority INTEGER DEFAULT '0' NOT NULL, target VARCHAR(255), arm VARCHAR(16) DEFAULT 'control' NOT NULL, shadow_of VARCHAR(26), raw_output JSON, tenant VARCHAR(32) DEFAULT 'default' NOT NULL, adopted BOOLEAN DEFAULT 0 NOT NULL, upstream JSON, row_version BIGINT DEFAULT '0' NOT NULL, replay_id VARCHAR(26), 
	CONSTRAINT pk_jobs PRIMARY KEY (id), 
	CONSTRAINT uq_jobs_idempotency_key UNIQUE (idempotency_key)
);

CREATE INDEX ix_jobs_state_next_attempt_at ON jobs (state, next_attempt_at);

CREATE INDEX ix_jobs_created_at_id ON jobs (created_at, id);

CREATE TABLE provider_events (
	id INTEGER NOT NULL, 
	job_id VARCHAR(26) NOT NULL, 
	provider VARCHAR(64) NOT NULL, 
	event_key VARCHAR(64) NOT NULL, 
	body BLOB NOT NULL, 
	received_at DATETIME NOT NULL, 
	processed_at DATETIME, 
	lease_owner VARCHAR(64), 
	leased_until DATETIME, 
	CONSTRAINT pk_provider_events PRIMARY KEY (id), 
	CONSTRAINT uq_provider_events_job_id_event_key UNIQUE (job_id, event_key), 
	CONSTRAINT fk_provider_events_job_id_jobs FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE INDEX ix_provider_events_processed_at_id ON provider_events (processed_at, id);

CREATE TABLE assets (
	"key" VARCHAR(512) NOT NULL, 
	job_id VARCHAR(26) NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	size_bytes BIGINT NOT NULL, 
	content_type VARCHAR(255) NOT NULL, 
	source VARCHAR(16) NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_assets PRIMARY KEY ("key"), 
	CONSTRAINT fk_assets_job_id_jobs FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE INDEX ix_assets_job_id ON assets (job_id);

CREATE TABLE endpoints (
	url VARCHAR(2048) NOT NULL, 
	disabled_at DATETIME NOT NULL, 
	reason TEXT NOT NULL, 
	CONSTRAINT pk_endpoints PRIMARY KEY (url)
);

CREATE TABLE secrets (
	name VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_secrets PRIMARY KEY (name)
);

CREATE TABLE files (
	id VARCHAR(26) NOT NULL, 
	owner VARCHAR(64) NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	content_type VARCHAR(255) NOT NULL, 
	size_bytes BIGINT NOT NULL, 
	sha256 VARCHAR(64) NOT NULL, 
	md5 VARCHAR(32) NOT NULL, 
	storage_key VARCHAR(512) NOT NULL, 
	file_metadata JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME NOT NULL, 
	CONSTRAINT pk_files PRIMARY KEY (id)
);

CREATE INDEX ix_files_owner_created_at_id ON files (owner, created_at, id);

CREATE INDEX ix_files_expires_at ON files (expires_at);

CREATE INDEX ix_jobs_data_removed_completed_at ON jobs (data_removed, completed_at);

CREATE TABLE routes (
	"key" VARCHAR(320) NOT NULL, 
	spec JSON NOT NULL, 
	config_hash VARCHAR(64) NOT NULL, 
	changed_live BOOLEAN DEFAULT 0 NOT NULL, 
	updated_at DATETIME NOT NULL, 
	CONSTRAINT pk_routes PRIMARY KEY ("key")
);

CREATE TABLE route_changes (
	id INTEGER NOT NULL, 
	route VARCHAR(320) NOT NULL, 
	at DATETIME NOT NULL, 
	who VARCHAR(128) NOT NULL, 
	action VARCHAR(32) NOT NULL, 
	"before" JSON, 
	"after" JSON NOT NULL, 
	reason TEXT NOT NULL, 
	evidence JSON, 
	CONSTRAINT pk_route_changes PRIMARY KEY (id)
);

CREATE INDEX ix_route_changes_route_id ON route_changes (route, id);

CREATE INDEX ix_jobs_route_completed_at ON jobs (route, completed_at);

CREATE INDEX ix_jobs_shadow_of ON jobs (shadow_of);

CREATE TABLE shadow_comparisons (
	shadow_id VARCHAR(26) NOT NULL, 
	primary_id VARCHAR(26) NOT NULL, 
	route VARCHAR(320) NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	created_at DATETIME NOT NULL, 
	compared_at DATETIME NOT NULL, 
	comparison JSON NOT NULL, replay_id VARCHAR(26), 
	CONSTRAINT pk_shadow_comparisons PRIMARY KEY (shadow_id)
);

CREATE INDEX ix_shadow_comparisons_route_kind_created_at ON shadow_comparisons (route, kind, created_at);

CREATE INDEX ix_shadow_comparisons_primary_id ON shadow_comparisons (primary_id);

CREATE TABLE console_sessions (
	id_hash VARCHAR(64) NOT NULL, 
	token_digest VARCHAR(64) NOT NULL, 
	csrf_token VARCHAR(64) NOT NULL, 
	created_at DATETIME NOT NULL, 
	seen_at DATETIME NOT NULL, 
	expires_at DATETIME NOT NULL, 
	CONSTRAINT pk_console_sessions PRIMARY KEY (id_hash)
);

CREATE INDEX ix_jobs_tenant_created_at_id ON jobs (tenant, created_at, id);

CREATE TABLE "outbox" (
	id INTEGER NOT NULL, 
	msg_id VARCHAR(64) NOT NULL, 
	job_id VARCHAR(26), 
	event VARCHAR(16) NOT NULL, 
	url TEXT NOT NULL, 
	payload TEXT NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	attempts INTEGER DEFAULT '0' NOT NULL, 
	created_at DATETIME NOT NULL, 
	next_attempt_at DATETIME, 
	last_attempt_at DATETIME, 
	delivered_at DATETIME, 
	last_status_code INTEGER, 
	last_error TEXT, 
	lease_owner VARCHAR(64), 
	leased_until DATETIME, 
	CONSTRAINT pk_outbox PRIMARY KEY (id), 
	CONSTRAINT uq_outbox_msg_id UNIQUE (msg_id), 
	CONSTRAINT fk_outbox_job_id_jobs FOREIGN KEY(job_id) REFERENCES jobs (id)
);

CREATE INDEX ix_outbox_status_next_attempt_at ON outbox (status, next_attempt_at);

CREATE INDEX ix_outbox_job_id_id ON outbox (job_id, id);

CREATE INDEX ix_outbox_delivered_at ON outbox (delivered_at);

CREATE TRIGGER jobs_row_version AFTER UPDATE ON jobs FOR EACH ROW WHEN NEW.row_version = OLD.row_version BEGIN UPDATE jobs SET row_version = OLD.row_version + 1 WHERE id = NEW.id; END;

CREATE TABLE shadow_replays (
	id VARCHAR(26) NOT NULL, 
	route VARCHAR(320) NOT NULL, 
	tenant VARCHAR(64), 
	since DATETIME, 
	until DATETIME NOT NULL, 
	max_inputs INTEGER, 
	baseline_percent FLOAT NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	total INTEGER DEFAULT '0' NOT NULL, 
	sent INTEGER DEFAULT '0' NOT NULL, 
	skipped INTEGER DEFAULT '0' NOT NULL, 
	jobs INTEGER DEFAULT '0' NOT NULL, 
	cursor_at DATETIME, 
	cursor_id VARCHAR(26), 
	who VARCHAR(128) NOT NULL, 
	lease_owner VARCHAR(64), 
	leased_until DATETIME, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	CONSTRAINT pk_shadow_replays PRIMARY KEY (id)
);

CREATE INDEX ix_shadow_replays_route_created_at ON shadow_replays (route, created_at);

CREATE INDEX ix_shadow_replays_state ON shadow_replays (state);

CREATE UNIQUE INDEX ix_jobs_replay_id_shadow_of_arm ON jobs (replay_id, shadow_of, arm);

CREATE INDEX ix_shadow_comparisons_replay_id_kind ON shadow_comparisons (replay_id, kind);

INSERT INTO alembic_version (version_num) VALUES ('0013');
