import Logging
import PQBridge

/// Schema migrations, applied in order, each in its own transaction, under an advisory
/// lock so that services starting together never race. Embedded in the binary so a
/// runtime image needs nothing beside the executable.
public enum Migrations {
    public struct Migration: Sendable {
        public let version: Int
        public let name: String
        public let sql: String
    }

    static let lockKey: Int64 = 0x5359_4E43_4C49  // "SYNCLI"

    public static let all: [Migration] = [
        Migration(version: 1, name: "sync core", sql: """
            CREATE FUNCTION syncline_rfc3339(t timestamptz) RETURNS text
              LANGUAGE sql IMMUTABLE PARALLEL SAFE
              AS $$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

            CREATE TABLE devices (
              device_id    uuid PRIMARY KEY,
              user_id      text NOT NULL,
              name         text NOT NULL,
              platform     text NOT NULL,
              push_url     text,
              push_secret  text NOT NULL,
              created_at   timestamptz NOT NULL DEFAULT now(),
              last_seen_at timestamptz NOT NULL DEFAULT now(),
              revoked_at   timestamptz
            );
            CREATE INDEX devices_by_user ON devices (user_id, created_at);

            -- The HLC receive rule's state, locked by the gateway while it stamps a push.
            CREATE TABLE user_clocks (
              user_id     text PRIMARY KEY,
              hlc_ms      bigint NOT NULL,
              hlc_counter integer NOT NULL
            );

            -- The per-user change counter (no missed changes), locked by the worker's applying transaction.
            CREATE TABLE user_counters (
              user_id       text PRIMARY KEY,
              counter       bigint NOT NULL DEFAULT 0,
              purge_horizon bigint NOT NULL DEFAULT 0
            );

            CREATE TABLE jobs (
              job_id          uuid PRIMARY KEY,
              user_id         text NOT NULL,
              device_id       uuid NOT NULL,
              status          text NOT NULL CHECK (status IN
                                ('queued', 'processing', 'retrying', 'succeeded', 'dead', 'discarded')),
              ops             jsonb NOT NULL,
              op_count        integer NOT NULL,
              attempts        integer NOT NULL DEFAULT 0,
              attempt_log     jsonb NOT NULL DEFAULT '[]',
              last_error      text,
              checkpoint      bigint,
              results         jsonb,
              trace_id        text,
              idempotency_key text,
              request_hash    text,
              created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
              published_at    timestamptz,
              finished_at     timestamptz
            );
            CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs (user_id, idempotency_key)
              WHERE idempotency_key IS NOT NULL;
            CREATE INDEX jobs_unpublished ON jobs (created_at)
              WHERE status = 'queued' AND published_at IS NULL;
            CREATE INDEX jobs_unfinished ON jobs (created_at)
              WHERE status IN ('queued', 'processing', 'retrying');
            CREATE INDEX jobs_by_user ON jobs (user_id, created_at);

            -- Every op_id that took effect (or was a duplicate or conflict) per user (each op takes effect at most once).
            CREATE TABLE op_ids (
              user_id    text NOT NULL,
              op_id      uuid NOT NULL,
              job_id     uuid NOT NULL,
              created_at timestamptz NOT NULL DEFAULT now(),
              PRIMARY KEY (user_id, op_id)
            );

            CREATE TABLE records (
              user_id          text NOT NULL,
              collection       text NOT NULL,
              record_id        text NOT NULL,
              version          bigint NOT NULL,
              deleted          boolean NOT NULL,
              data             jsonb NOT NULL DEFAULT '{}',
              field_clocks     jsonb NOT NULL DEFAULT '{}',
              floor_clock      text,
              write_clock      text,
              delete_clock     text,
              updated_at       timestamptz NOT NULL DEFAULT now(),
              updated_by       uuid,
              visibility       text NOT NULL DEFAULT 'private' CHECK (visibility IN ('private', 'public')),
              public_id        text,
              can_fork         boolean NOT NULL DEFAULT false,
              published_at     timestamptz,
              visibility_clock text,
              PRIMARY KEY (user_id, collection, record_id)
            );
            CREATE INDEX records_changes ON records (user_id, version);
            CREATE UNIQUE INDEX records_by_public_id ON records (public_id) WHERE public_id IS NOT NULL;
            """),
        Migration(version: 2, name: "dead letters and audit", sql: """
            -- One row per message parked in a dead-letter queue and not yet acted on; the
            -- queue holds one message per row (admin actions reconcile the two).
            CREATE TABLE dead_letters (
              dead_letter_id uuid PRIMARY KEY,   -- the job id, or derived from the message body
              queue          text NOT NULL DEFAULT 'sync' CHECK (queue IN ('sync', 'notify')),
              job_id         uuid,               -- set when the message names a job that exists
              user_id        text,
              device_id      uuid,
              reason         text NOT NULL,
              last_error     text,
              attempts       integer NOT NULL DEFAULT 0,
              op_count       integer NOT NULL DEFAULT 0,
              payload        text NOT NULL,      -- the message body as received
              dead_at        timestamptz NOT NULL DEFAULT clock_timestamp()
            );
            CREATE INDEX dead_letters_by_time ON dead_letters (queue, dead_at DESC, dead_letter_id DESC);
            CREATE INDEX dead_letters_by_user ON dead_letters (user_id, dead_at);

            CREATE TABLE admin_audit (
              audit_id bigserial PRIMARY KEY,
              at       timestamptz NOT NULL DEFAULT clock_timestamp(),
              actor    text NOT NULL,
              action   text NOT NULL,
              target   text,
              filter   jsonb,
              count    integer NOT NULL DEFAULT 0
            );

            -- Recent job rates for operators.
            CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
            """),
        Migration(version: 3, name: "public content", sql: """
            -- Who published (the token's name claim, never the user id) and how often read.
            ALTER TABLE jobs ADD COLUMN author_name text;
            ALTER TABLE records ADD COLUMN author text;
            ALTER TABLE records ADD COLUMN view_count bigint NOT NULL DEFAULT 0;
            -- One record per public id, checked at commit so that one job may move an id
            -- from one record to another.
            DROP INDEX records_by_public_id;
            ALTER TABLE records ADD CONSTRAINT records_public_id_unique UNIQUE (public_id) DEFERRABLE INITIALLY DEFERRED;
            CREATE INDEX records_public_listing ON records (published_at DESC, public_id)
              WHERE public_id IS NOT NULL AND NOT deleted;
            """),
        Migration(version: 4, name: "retention", sql: """
            -- The newest delete clock of a purged tombstone: an op older than it on a record
            -- that no longer exists is refused (it could resurrect a purged delete).
            ALTER TABLE user_counters ADD COLUMN purge_clock text COLLATE "C";
            CREATE INDEX op_ids_by_age ON op_ids (created_at);
            CREATE INDEX records_tombstones ON records (updated_at) WHERE deleted;
            CREATE INDEX dead_letters_by_age ON dead_letters (dead_at);
            """),
        Migration(version: 5, name: "fanout replicas", sql: """
            -- Each fanout replica's own event queue, refreshed while it runs, so operators
            -- see every queue (AMQP 0-9-1 cannot list queues).
            CREATE TABLE fanout_queues (
              queue   text PRIMARY KEY,
              seen_at timestamptz NOT NULL DEFAULT now()
            );
            """),
        Migration(version: 6, name: "account deletion", sql: """
            -- A deletion in progress keeps the user id until it is done; afterwards only a
            -- digest of it stays, to answer the deletion's status.
            CREATE TABLE account_deletions (
              user_hash    text PRIMARY KEY,
              user_id      text,
              requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
              finished_at  timestamptz
            );
            CREATE INDEX account_deletions_pending ON account_deletions (requested_at) WHERE finished_at IS NULL;
            -- Jobs of deleted accounts: a worker that meets one in the queue drops it
            -- instead of dead-lettering an unknown job. Purged after JOB_RETENTION.
            CREATE TABLE forgotten_jobs (
              job_id       uuid PRIMARY KEY,
              forgotten_at timestamptz NOT NULL DEFAULT clock_timestamp()
            );
            CREATE INDEX forgotten_jobs_by_age ON forgotten_jobs (forgotten_at);
            """),
        Migration(version: 7, name: "forks, unlisted records and discovery", sql: """
            -- `visibility` is what readers see: 'public' or 'unlisted' only while the record
            -- holds data. A publish that arrived before the data keeps its clock and id, private.
            ALTER TABLE records DROP CONSTRAINT records_visibility_check;
            UPDATE records SET visibility = 'private' WHERE visibility = 'public' AND (deleted OR write_clock IS NULL);
            ALTER TABLE records ADD CONSTRAINT records_visibility_check
              CHECK (visibility IN ('private', 'unlisted', 'public'));
            ALTER TABLE records
              ADD COLUMN listed boolean NOT NULL DEFAULT true,
              ADD COLUMN forked_from text,
              ADD COLUMN fork_clock text,
              ADD COLUMN fork_count bigint NOT NULL DEFAULT 0;

            -- Discover: `data.tags` when it is an array of strings, and a full-text document
            -- of title, description and tags ('simple': any language, whole words).
            CREATE FUNCTION syncline_public_tags(data jsonb) RETURNS text[]
              LANGUAGE sql IMMUTABLE PARALLEL SAFE
              AS $$ SELECT CASE
                WHEN jsonb_typeof(data -> 'tags') = 'array'
                     AND NOT jsonb_path_exists(data -> 'tags', '$[*] ? (@.type() != "string")')
                THEN ARRAY(SELECT t FROM jsonb_array_elements_text(data -> 'tags') WITH ORDINALITY AS e(t, n) ORDER BY n)
                ELSE '{}' END $$;
            -- The tags a `tag=` filter can match: those an index entry can hold.
            CREATE FUNCTION syncline_tag_keys(data jsonb) RETURNS text[]
              LANGUAGE sql IMMUTABLE PARALLEL SAFE
              AS $$ SELECT ARRAY(SELECT DISTINCT t FROM unnest(syncline_public_tags(data)) AS t
                                 WHERE char_length(t) <= 200) $$;
            CREATE FUNCTION syncline_text_field(data jsonb, field text) RETURNS text
              LANGUAGE sql IMMUTABLE PARALLEL SAFE
              AS $$ SELECT CASE WHEN jsonb_typeof(data -> field) = 'string' THEN data ->> field END $$;
            CREATE FUNCTION syncline_search_document(data jsonb) RETURNS tsvector
              LANGUAGE sql IMMUTABLE PARALLEL SAFE
              AS $$ SELECT to_tsvector('simple'::regconfig, concat_ws(' ',
                syncline_text_field(data, 'title'), syncline_text_field(data, 'description'),
                array_to_string(syncline_public_tags(data), ' '))) $$;
            ALTER TABLE records
              ADD COLUMN public_tags text[]
                GENERATED ALWAYS AS (CASE WHEN visibility = 'public' THEN syncline_tag_keys(data) END) STORED,
              ADD COLUMN public_search tsvector
                GENERATED ALWAYS AS (CASE WHEN visibility = 'public' THEN syncline_search_document(data) END) STORED;
            DROP INDEX records_public_listing;
            CREATE INDEX records_public_listing ON records (published_at DESC, public_id) WHERE visibility = 'public';
            -- fastupdate off: a publish pays for its index entries at once, so a read never
            -- scans a pending list (reads of public content far outnumber publishes).
            CREATE INDEX records_public_by_tag ON records USING gin (public_tags)
              WITH (fastupdate = off) WHERE visibility = 'public';
            CREATE INDEX records_public_search ON records USING gin (public_search)
              WITH (fastupdate = off) WHERE visibility = 'public';

            -- Who forked which record: a record's fork_count rises once per forking user.
            CREATE TABLE forks (
              source_user_id    text NOT NULL,
              source_collection text NOT NULL,
              source_record_id  text NOT NULL,
              user_id           text NOT NULL,
              forked_at         timestamptz NOT NULL DEFAULT now(),
              PRIMARY KEY (source_user_id, source_collection, source_record_id, user_id)
            );
            CREATE INDEX forks_by_user ON forks (user_id);
            """),
        Migration(version: 8, name: "spaces", sql: """
            -- A space is the unit of data, change counter and cursor; users are its members.
            -- Every user has a personal space (personal_of), made on first use.
            CREATE TABLE spaces (
              space_id    uuid PRIMARY KEY,
              name        text NOT NULL,
              personal_of text UNIQUE,
              created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
            );
            CREATE TABLE space_members (
              space_id  uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              user_id   text NOT NULL,
              role      text NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
              joined_at timestamptz NOT NULL DEFAULT clock_timestamp(),
              PRIMARY KEY (space_id, user_id)
            );
            CREATE INDEX space_members_by_user ON space_members (user_id, joined_at);

            -- Existing data moves into its user's personal space.
            INSERT INTO spaces (space_id, name, personal_of)
            SELECT gen_random_uuid(), 'Personal', u FROM (
              SELECT user_id FROM user_counters UNION SELECT user_id FROM records
              UNION SELECT user_id FROM op_ids UNION SELECT user_id FROM jobs) AS t(u);
            INSERT INTO space_members (space_id, user_id, role) SELECT space_id, personal_of, 'owner' FROM spaces;

            ALTER TABLE records ADD COLUMN space_id uuid;
            UPDATE records r SET space_id = s.space_id FROM spaces s WHERE s.personal_of = r.user_id;
            ALTER TABLE records DROP CONSTRAINT records_pkey;
            ALTER TABLE records DROP COLUMN user_id;
            ALTER TABLE records ALTER COLUMN space_id SET NOT NULL;
            ALTER TABLE records ADD PRIMARY KEY (space_id, collection, record_id);
            CREATE INDEX records_changes ON records (space_id, version);

            ALTER TABLE user_counters RENAME TO space_counters;
            ALTER TABLE space_counters ADD COLUMN space_id uuid;
            UPDATE space_counters c SET space_id = s.space_id FROM spaces s WHERE s.personal_of = c.user_id;
            ALTER TABLE space_counters DROP CONSTRAINT user_counters_pkey;
            ALTER TABLE space_counters DROP COLUMN user_id;
            ALTER TABLE space_counters ALTER COLUMN space_id SET NOT NULL;
            ALTER TABLE space_counters ADD PRIMARY KEY (space_id);

            ALTER TABLE op_ids ADD COLUMN space_id uuid;
            UPDATE op_ids o SET space_id = s.space_id FROM spaces s WHERE s.personal_of = o.user_id;
            ALTER TABLE op_ids DROP CONSTRAINT op_ids_pkey;
            ALTER TABLE op_ids DROP COLUMN user_id;
            ALTER TABLE op_ids ALTER COLUMN space_id SET NOT NULL;
            ALTER TABLE op_ids ADD PRIMARY KEY (space_id, op_id);

            -- A job is one user's push into one space.
            ALTER TABLE jobs ADD COLUMN space_id uuid;
            UPDATE jobs j SET space_id = s.space_id FROM spaces s WHERE s.personal_of = j.user_id;
            ALTER TABLE jobs ALTER COLUMN space_id SET NOT NULL;

            ALTER TABLE forks ADD COLUMN source_space_id uuid;
            UPDATE forks f SET source_space_id = s.space_id FROM spaces s WHERE s.personal_of = f.source_user_id;
            DELETE FROM forks WHERE source_space_id IS NULL;
            ALTER TABLE forks DROP CONSTRAINT forks_pkey;
            ALTER TABLE forks DROP COLUMN source_user_id;
            ALTER TABLE forks ALTER COLUMN source_space_id SET NOT NULL;
            ALTER TABLE forks ADD PRIMARY KEY (source_space_id, source_collection, source_record_id, user_id);
            """),
        Migration(version: 9, name: "space invitations", sql: """
            -- Single-use invitation codes; only a digest of the code is kept.
            CREATE TABLE space_invitations (
              code_hash  text PRIMARY KEY,
              space_id   uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              role       text NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
              created_by text NOT NULL,
              created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
              expires_at timestamptz NOT NULL,
              used_at    timestamptz
            );
            CREATE INDEX space_invitations_by_expiry ON space_invitations (expires_at);
            """),
        Migration(version: 10, name: "dead letters by space", sql: """
            ALTER TABLE dead_letters ADD COLUMN space_id uuid;
            UPDATE dead_letters d SET space_id = j.space_id FROM jobs j WHERE j.job_id = d.job_id;
            CREATE INDEX dead_letters_by_space ON dead_letters (space_id, dead_at);
            """),
        // The size of a record's data as a pull sends it, for the page's byte budget
        // (pg_column_size would count compressed data at its compressed size).
        Migration(version: 11, name: "record data size", sql: """
            ALTER TABLE records ADD COLUMN data_bytes integer GENERATED ALWAYS AS (octet_length(data::text)) STORED;
            """),
        Migration(version: 12, name: "invitations, authors and forkers", sql: """
            -- Owners list and revoke open invitations by this id; the code stays secret.
            ALTER TABLE space_invitations ADD COLUMN invitation_id uuid NOT NULL DEFAULT gen_random_uuid();
            CREATE UNIQUE INDEX space_invitations_by_id ON space_invitations (invitation_id);
            CREATE INDEX space_invitations_by_creator ON space_invitations (space_id, created_by);

            -- Who the shown author is, so that deleting the account removes their name.
            ALTER TABLE records ADD COLUMN author_user text;
            UPDATE records r SET author_user = d.user_id FROM devices d WHERE r.author IS NOT NULL AND d.device_id = r.updated_by;
            CREATE INDEX records_by_author ON records (author_user) WHERE author_user IS NOT NULL;

            -- A forker is kept as the SHA-256 of their user id, which outlives their account:
            -- forking, deleting the account and forking again counts once.
            ALTER TABLE forks DROP CONSTRAINT forks_pkey;
            UPDATE forks SET user_id = encode(sha256(convert_to(user_id, 'UTF8')), 'hex');
            ALTER TABLE forks RENAME COLUMN user_id TO forker_hash;
            DELETE FROM forks a USING forks b
              WHERE a.ctid < b.ctid AND a.source_space_id = b.source_space_id AND a.source_collection = b.source_collection
                AND a.source_record_id = b.source_record_id AND a.forker_hash = b.forker_hash;
            ALTER TABLE forks ADD PRIMARY KEY (source_space_id, source_collection, source_record_id, forker_hash);
            DROP INDEX forks_by_user;

            -- Public ids held by records without data (never written, or deleted), which purge releases.
            CREATE INDEX records_reserved_public_ids ON records (updated_at)
              WHERE public_id IS NOT NULL AND visibility = 'private';
            """),
        Migration(version: 13, name: "space counters belong to spaces", sql: """
            -- A worker that meets a job of a space deleted meanwhile makes no counter for it.
            DELETE FROM space_counters c WHERE NOT EXISTS (SELECT 1 FROM spaces s WHERE s.space_id = c.space_id);
            ALTER TABLE space_counters ADD CONSTRAINT space_counters_space_fkey
              FOREIGN KEY (space_id) REFERENCES spaces ON DELETE CASCADE;
            """),
        // Less written per op. (Field clocks are stored without those equal to the newest
        // write, by the apply path; rows stored before read the same.)
        Migration(version: 14, name: "fewer index entries per op", sql: """
            -- Only records holding a public id are indexed (the unique constraint indexed every
            -- record's NULL); still one record per id, checked at commit.
            ALTER TABLE records DROP CONSTRAINT records_public_id_unique;
            ALTER TABLE records ADD CONSTRAINT records_public_id_unique
              EXCLUDE USING btree (public_id WITH =) WHERE (public_id IS NOT NULL) DEFERRABLE INITIALLY DEFERRED;
            -- op_ids arrive in time order: a BRIN index finds the old ones for purge, written
            -- once per range of pages instead of once per op.
            DROP INDEX op_ids_by_age;
            CREATE INDEX op_ids_by_age ON op_ids USING brin (created_at);
            -- Which job remembered an op_id was never read.
            ALTER TABLE op_ids DROP COLUMN job_id;
            """),
        Migration(version: 15, name: "attachments", sql: """
            -- A space's files, by content. The bytes are an object in one store; a fork's
            -- file points at its source's object.
            CREATE TABLE blobs (
              space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              sha256             text NOT NULL,
              object_id          uuid NOT NULL,
              store              text NOT NULL CHECK (store IN ('postgres', 'file')),
              size               bigint NOT NULL,
              content_type       text NOT NULL,
              -- Records of the space (live or tombstones) whose data references it, kept by
              -- the apply path in the record's transaction.
              ref_count          integer NOT NULL DEFAULT 0,
              unreferenced_since timestamptz DEFAULT clock_timestamp(),
              -- The last push that referenced it: its job may not be applied yet.
              claimed_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
              created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
              PRIMARY KEY (space_id, sha256)
            );
            CREATE INDEX blobs_by_object ON blobs (object_id);
            -- The files a record counts towards: those its data references, or, for a
            -- tombstone, those its data referenced when it was deleted.
            ALTER TABLE records ADD COLUMN blob_refs text[];
            CREATE INDEX blobs_unreferenced ON blobs (unreferenced_since) WHERE ref_count = 0;

            -- Bytes in the PostgreSQL store, in rows of at most 8,000 bytes kept in the
            -- table's own pages, as they come (no TOAST, no compression: files are mostly
            -- compressed already).
            CREATE TABLE blob_chunks (
              object_id    uuid NOT NULL,
              start_offset bigint NOT NULL,
              data         bytea NOT NULL,
              PRIMARY KEY (object_id, start_offset)
            );
            ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE PLAIN;

            -- Objects to remove from their store once `not_before` has passed: those of
            -- deleted files, and those still being written (due when abandoned).
            CREATE TABLE blob_garbage (
              object_id  uuid PRIMARY KEY,
              sha256     text NOT NULL,
              store      text NOT NULL,
              not_before timestamptz NOT NULL
            );
            CREATE INDEX blob_garbage_due ON blob_garbage (not_before);

            -- Resumable uploads (tus); the upload's id is the object its bytes go to.
            CREATE TABLE blob_uploads (
              upload_id    uuid PRIMARY KEY,
              user_id      text NOT NULL,
              space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              sha256       text NOT NULL,
              content_type text NOT NULL,
              length       bigint NOT NULL,
              received     bigint NOT NULL DEFAULT 0,
              finished     boolean NOT NULL DEFAULT false,
              store        text NOT NULL,
              expires_at   timestamptz NOT NULL
            );
            CREATE INDEX blob_uploads_by_expiry ON blob_uploads (expires_at);

            -- However a file row goes (purge, a space's or an account's deletion), an object
            -- nothing points at any more is garbage at once; so is an abandoned upload's.
            CREATE FUNCTION syncline_blob_released() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NOT EXISTS (SELECT 1 FROM blobs WHERE object_id = OLD.object_id) THEN
                INSERT INTO blob_garbage (object_id, sha256, store, not_before)
                VALUES (OLD.object_id, OLD.sha256, OLD.store, clock_timestamp())
                ON CONFLICT (object_id) DO UPDATE SET not_before = EXCLUDED.not_before;
              END IF;
              RETURN NULL;
            END $$;
            CREATE TRIGGER blobs_released AFTER DELETE ON blobs
              FOR EACH ROW EXECUTE FUNCTION syncline_blob_released();
            CREATE FUNCTION syncline_upload_ended() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              UPDATE blob_garbage SET not_before = clock_timestamp() WHERE object_id = OLD.upload_id;
              RETURN NULL;
            END $$;
            CREATE TRIGGER blob_uploads_ended AFTER DELETE ON blob_uploads
              FOR EACH ROW EXECUTE FUNCTION syncline_upload_ended();
            """),
        Migration(version: 16, name: "uploads follow write access", sql: """
            -- A member who can no longer write to a space (removed, gone with their account,
            -- demoted to viewer) has their unfinished uploads into it ended, however that
            -- happened; the uploads' objects are garbage at once.
            CREATE FUNCTION syncline_member_lost_write() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF TG_OP = 'DELETE' OR NEW.role = 'viewer' THEN
                DELETE FROM blob_uploads WHERE space_id = OLD.space_id AND user_id = OLD.user_id AND NOT finished;
              END IF;
              RETURN NULL;
            END $$;
            CREATE TRIGGER space_members_lost_write AFTER DELETE OR UPDATE OF role ON space_members
              FOR EACH ROW EXECUTE FUNCTION syncline_member_lost_write();
            -- The trigger's lookup, and a user's open uploads counted against their cap.
            CREATE INDEX blob_uploads_by_user ON blob_uploads (user_id, space_id);
            """),
        Migration(version: 17, name: "forks name no unlisted source", sql: """
            -- A fork names its source only where its readers could read the source anyway:
            -- forks of another space's unlisted record stop passing on its id.
            UPDATE records r SET forked_from = NULL
            WHERE r.forked_from IS NOT NULL AND EXISTS (
              SELECT 1 FROM records s
              WHERE s.public_id = r.forked_from AND s.space_id <> r.space_id AND s.visibility = 'unlisted');
            """),
        Migration(version: 18, name: "jobs keyed by space", sql: """
            -- A job is its space's, like the records it writes: keyed (space_id, job_id), so
            -- that a database distributed by space keeps a job with its records, and the
            -- apply's transaction on one node. Job ids stay unique (time-ordered UUIDs);
            -- jobs_by_id serves what names a job alone (operators, old clients), with its
            -- user, so that another user's job is passed over in the index, as an unknown
            -- id is, without reading its row.
            ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
            ALTER TABLE jobs ADD PRIMARY KEY (space_id, job_id);
            CREATE INDEX jobs_by_id ON jobs (job_id, user_id);
            -- An idempotency key is the user's within the space pushed to.
            DROP INDEX jobs_by_idempotency_key;
            CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs (space_id, user_id, idempotency_key)
              WHERE idempotency_key IS NOT NULL;
            """),
        Migration(version: 19, name: "job ops out of line", sql: """
            -- A job row is written twice: queued, then finished. A row over 1 KB compresses its
            -- largest values and keeps them in TOAST, where the finishing update leaves them as
            -- they are instead of writing the ops again (the default, 2 KB, let a 20-op push's
            -- compressed ops stay in the row, copied into the WAL by both writes).
            ALTER TABLE jobs SET (toast_tuple_target = 1024);
            """),
        Migration(version: 20, name: "the app's rules", sql: """
            -- Every version of the rules document ever applied; the highest is current.
            -- Nothing is rewritten when they change: a job is judged by the version current
            -- when it is applied, and names it.
            CREATE TABLE rules (
              version    bigint PRIMARY KEY,
              document   jsonb NOT NULL,
              applied_by text NOT NULL,
              applied_at timestamptz NOT NULL DEFAULT now()
            );
            -- The user whose op first gave a record data: its `author` in the rules.
            ALTER TABLE records ADD COLUMN created_by text;
            ALTER TABLE jobs ADD COLUMN rules_version bigint;
            """),
        Migration(version: 21, name: "the app's backend", sql: """
            -- Tokens of the app's own servers: never members, never devices. Only a digest of
            -- the token is kept; `spaces` NULL means every space.
            CREATE TABLE service_tokens (
              token_id    uuid PRIMARY KEY,
              name        text NOT NULL,
              token_hash  text NOT NULL UNIQUE,
              spaces      uuid[],
              read_only   boolean NOT NULL,
              created_by  text NOT NULL,
              created_at  timestamptz NOT NULL DEFAULT now(),
              revoked_at  timestamptz
            );
            -- Who and which job last changed a record: what the record feed and exports say.
            ALTER TABLE records ADD COLUMN changed_by text;
            ALTER TABLE records ADD COLUMN changed_job uuid;
            -- Record feeds: each endpoint's filter, and per space how far it was delivered.
            CREATE TABLE feeds (
              feed_id     uuid PRIMARY KEY,
              url         text NOT NULL,
              secret      text NOT NULL,
              spaces      uuid[],
              collections text[],
              created_by  text NOT NULL,
              created_at  timestamptz NOT NULL DEFAULT now()
            );
            CREATE TABLE feed_positions (
              feed_id         uuid NOT NULL REFERENCES feeds ON DELETE CASCADE,
              space_id        uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              version         bigint NOT NULL,      -- delivered up to and including
              attempts        integer NOT NULL DEFAULT 0,
              next_attempt_at timestamptz NOT NULL DEFAULT now(),
              leased_until    timestamptz,
              dead            boolean NOT NULL DEFAULT false,
              last_error      text,
              PRIMARY KEY (space_id, feed_id)
            );
            -- A space made after a feed for every space starts at 0 in it, from the moment
            -- it exists (the fanout also looks for spaces missed by a feed made meanwhile).
            CREATE FUNCTION syncline_feed_positions_of_new_space() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              INSERT INTO feed_positions (feed_id, space_id, version)
              SELECT feed_id, NEW.space_id, 0 FROM feeds WHERE spaces IS NULL
              ON CONFLICT DO NOTHING;
              RETURN NEW;
            END $$;
            CREATE TRIGGER spaces_feed_positions AFTER INSERT ON spaces
              FOR EACH ROW EXECUTE FUNCTION syncline_feed_positions_of_new_space();
            ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_queue_check;
            ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_queue_check CHECK (queue IN ('sync', 'notify', 'feed'));
            -- The deployment's generation: a new one after each restore from a backup. The
            -- versions a restore lost are never handed out again: each space's counter jumps
            -- past them, and a cursor inside a gap must pull from the start.
            CREATE TABLE deployment (
              singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
              generation bigint NOT NULL,
              changed_at timestamptz NOT NULL DEFAULT now()
            );
            INSERT INTO deployment (generation) VALUES (1);
            CREATE TABLE cursor_gaps (
              space_id uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              after    bigint NOT NULL,   -- the counter when the restore was made
              before   bigint NOT NULL,   -- where the counter went on from
              PRIMARY KEY (space_id, after)
            );
            """),
        Migration(version: 22, name: "counters and sets", sql: """
            -- What increments, adds and removes keep per field until a whole write or purge
            -- settles them (see StoredMerge); NULL for a record with none.
            ALTER TABLE records ADD COLUMN merge_state jsonb;
            -- Purge visits only the records that keep any.
            CREATE INDEX records_merged ON records (space_id, collection, record_id) WHERE merge_state IS NOT NULL;
            """),
        Migration(version: 23, name: "support console", sql: """
            -- Where each device's pulls reached, per space: written behind the pulls (each
            -- gateway at most once a second), for "why doesn't this device have it".
            CREATE TABLE device_cursors (
              device_id   uuid NOT NULL REFERENCES devices ON DELETE CASCADE,
              space_id    uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
              cursor      bigint NOT NULL,
              collections text[],               -- the pull's filter; NULL for every collection
              pulled_at   timestamptz NOT NULL,
              PRIMARY KEY (space_id, device_id)
            );
            CREATE INDEX device_cursors_by_device ON device_cursors (device_id);
            -- Ops a device reports it set aside (the server's refusal it cannot act on).
            CREATE TABLE set_aside_reports (
              device_id   uuid NOT NULL REFERENCES devices ON DELETE CASCADE,
              op_id       uuid NOT NULL,
              space_id    uuid,
              collection  text,
              record_id   text,
              job_id      uuid,
              reason      text NOT NULL,
              reported_at timestamptz NOT NULL DEFAULT now(),
              PRIMARY KEY (device_id, op_id)
            );
            CREATE INDEX set_aside_reports_by_age ON set_aside_reports (reported_at);
            -- The streams each fanout replica holds, as it last wrote them.
            ALTER TABLE fanout_queues ADD COLUMN streams jsonb NOT NULL DEFAULT '[]';
            -- A device's jobs, a trace id's job, and the jobs that named a record.
            CREATE INDEX jobs_by_device ON jobs (device_id, created_at);
            -- trace_id holds the push's traceparent; a trace id is its second part.
            CREATE INDEX jobs_by_trace ON jobs (split_part(trace_id, '-', 2)) WHERE trace_id IS NOT NULL;
            -- The records each job names (`<space>/<collection>/<id>`), written with the job
            -- at intake and never updated: the job's finishing update leaves this row and
            -- its index alone.
            CREATE TABLE job_records (
              space_id uuid NOT NULL,
              job_id   uuid NOT NULL,
              records  text[] NOT NULL,
              PRIMARY KEY (space_id, job_id),
              FOREIGN KEY (space_id, job_id) REFERENCES jobs ON DELETE CASCADE
            );
            CREATE INDEX job_records_by_record ON job_records USING gin (records);
            -- Whose data an admin looked at.
            ALTER TABLE admin_audit ADD COLUMN subject text;
            """),
    ]

    /// Applies every migration not yet applied. Safe to run from many processes at once.
    public static func apply(on pool: PGPool, logger: Logger) async throws -> [Int] {
        try await pool.withConnection { connection in
            try connection.execute("SELECT pg_advisory_lock(\(lockKey))")
            defer { _ = try? connection.execute("SELECT pg_advisory_unlock(\(lockKey))") }
            try connection.execute("""
                CREATE TABLE IF NOT EXISTS schema_migrations (
                  version    integer PRIMARY KEY,
                  name       text NOT NULL,
                  applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
            let done = Set(try connection.execute("SELECT version FROM schema_migrations").map { try $0.decode(Int.self, at: 0) })
            var applied: [Int] = []
            for migration in all where !done.contains(migration.version) {
                try connection.transaction { connection in
                    try connection.executeScript(migration.sql)
                    try connection.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (\(Int32(migration.version)), \(migration.name))")
                }
                logger.info("applied migration", metadata: ["migration.version": "\(migration.version)"])
                applied.append(migration.version)
            }
            return applied
        }
    }
}
