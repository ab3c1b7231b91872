import Foundation
import PQBridge
import SyncModels

/// The `records` columns the apply reads and writes, each declared once. The read's select
/// list is `RecordRow`'s coding keys, and the row is decoded by those names. The write's
/// `unnest` parameters and their aliases, the insert's columns and the update's assignments
/// all come from `WrittenColumn.all`.
extension ApplyStore {
    /// A record as `loadState` reads it.
    struct RecordRow: Decodable {
        let space: SpaceID
        let collection: String
        let id: String
        let version: Int64
        let data: String
        let fieldClocks: String
        let mergeState: String?
        let floorClock: String?
        let writeClock: String?
        let deleteClock: String?
        let updatedBy: String?
        let publicID: String?
        let canFork: Bool
        let visibilityClock: String?
        let listed: Bool
        let forkedFrom: String?
        let forkClock: String?
        let publishedAt: String?
        let blobRefs: [String]?
        let createdBy: UserID?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case space = "space_id", collection, id = "record_id", version, data, fieldClocks = "field_clocks", mergeState = "merge_state"
            case floorClock = "floor_clock", writeClock = "write_clock", deleteClock = "delete_clock"
            case updatedBy = "updated_by", publicID = "public_id", canFork = "can_fork"
            case visibilityClock = "visibility_clock", listed, forkedFrom = "forked_from", forkClock = "fork_clock"
            case publishedAt = "published_at", blobRefs = "blob_refs", createdBy = "created_by"
        }

        /// The select list over `records r`: every key's column (times as RFC 3339 text).
        static let selection = CodingKeys.allCases.map { key in
            key == .publishedAt ? "syncline_rfc3339(r.published_at) AS published_at" : "r.\(key.rawValue)"
        }.joined(separator: ", ")

        var key: RecordKey { RecordKey(collection: collection, id: id) }

        /// The stored floor of a record whose floor is its write clock: an upsert raises the
        /// floor to its own stamp, so most records would store the same 93-byte stamp twice
        /// (written to the WAL with every change).
        static let floorIsWriteClock = ""

        static func storedFloor(_ state: RecordState) -> String? {
            guard let floor = state.floor else { return nil }
            return floor == state.writeClock ? floorIsWriteClock : floor.description
        }

        func stored() throws -> StoredRecord {
            let fields = try JSONParser.parse(data).objectValue ?? [:]
            let written = writeClock.flatMap(StoredStamp.stamp)
            let clocks = (try JSONParser.parse(fieldClocks).objectValue ?? [:]).compactMapValues { $0.stringValue.flatMap(Stamp.init(stored:)) }
            let merged = try StoredMerge.merged(mergeState)
            let state = RecordState(
                fields: fields,
                fieldClocks: RecordState.restoringFieldClocks(clocks, fields: fields, writeClock: written, merged: merged),
                floor: floorClock == Self.floorIsWriteClock ? written : floorClock.flatMap(Stamp.init(stored:)),
                writeClock: written,
                deleteClock: deleteClock.flatMap(Stamp.init(stored:)),
                visibility: visibilityClock.flatMap(Stamp.init(stored:)).map {
                    RecordState.Visibility(publicID: publicID, canFork: canFork, listed: listed, clock: $0)
                },
                fork: forkClock.flatMap(Stamp.init(stored:)).map { RecordState.Fork(publicID: forkedFrom, clock: $0) },
                merged: merged)
            return StoredRecord(
                key: key, version: version, state: state, updatedBy: updatedBy, publishedAt: publishedAt, creator: createdBy)
        }
    }

    /// One column of the apply's write: an array parameter with a value per written record
    /// (in key order), unnested under `name` into the statement's `source` rows.
    struct WrittenColumn {
        enum Role {
            /// Part of the record's key: inserted, and matched by the update.
            case key
            /// Inserted and updated as `stored`.
            case copied
            /// Read by the statement, not stored as is (whether the record is stored, the author).
            case input
        }

        let name: String
        let role: Role
        let parameter: PGParameter
        /// The stored value, as SQL over the source row `s`.
        let stored: String

        init(_ name: String, _ role: Role, _ value: some PGEncodable, cast: String = "", stored: String? = nil) {
            self.name = name
            self.role = role
            self.parameter = PGParameter(value, cast: cast)
            self.stored = stored ?? "s.\(name)"
        }

        /// Columns the insert computes: when the record was changed and published (now,
        /// if readers see it), and the author shown once it is.
        static let computedOnInsert: [(name: String, value: String)] = [
            ("updated_at", "clock_timestamp()"),
            ("published_at", "CASE WHEN s.visibility = \(hidden) THEN NULL ELSE clock_timestamp() END"),
            ("author", "s.shown_author"),
            ("author_user", "s.shown_author_user"),
        ]

        /// The same columns as the update computes them, against the stored row: a record
        /// that readers start to see, or under a new public id, is published now, with the
        /// new author; otherwise it keeps its publication.
        static let computedOnUpdate = """
            updated_at = CASE WHEN records.version <> s.version THEN clock_timestamp() ELSE records.updated_at END,
            published_at = CASE WHEN s.visibility = \(hidden) THEN NULL
                                WHEN records.visibility <> \(hidden)
                                     AND records.public_id IS NOT DISTINCT FROM s.public_id THEN records.published_at
                                ELSE clock_timestamp() END,
            author = CASE WHEN records.public_id IS DISTINCT FROM s.public_id
                          THEN coalesce(s.shown_author, records.author)
                          ELSE coalesce(records.author, s.shown_author) END,
            author_user = CASE WHEN (records.public_id IS DISTINCT FROM s.public_id AND s.shown_author IS NOT NULL)
                                    OR (records.public_id IS NOT DISTINCT FROM s.public_id AND records.author IS NULL)
                               THEN s.shown_author_user ELSE records.author_user END
            """

        private static let hidden = PGQuery.literal(RecordState.PublicVisibility.private.rawValue)

        /// The columns of writing `rows`. Columns the statement computes itself
        /// (`updated_at`, `published_at`, and the author shown once published) are not here.
        static func all(_ rows: [(key: SpaceKey, value: StateWrites.Record)], _ writes: StateWrites) -> [WrittenColumn] {
            let records = rows.map(\.value.record)
            let states = records.map(\.state)
            return [
                WrittenColumn("stored", .input, rows.map { writes.stored.contains($0.key) }),
                WrittenColumn("space_id", .key, rows.map(\.key.space), cast: "::uuid[]"),
                WrittenColumn("collection", .key, rows.map(\.key.key.collection)),
                WrittenColumn("record_id", .key, rows.map(\.key.key.id)),
                WrittenColumn("version", .copied, records.map(\.version)),
                WrittenColumn("deleted", .copied, states.map(\.deleted)),
                WrittenColumn("data", .copied, states.map { PGJSON(JSONWriter.string(.object($0.fields))) }),
                WrittenColumn("field_clocks", .copied, states.map {
                    PGJSON(JSONWriter.string(.object($0.storedFieldClocks.mapValues { .string($0.description) })))
                }),
                WrittenColumn("merge_state", .copied, states.map { StoredMerge.text($0.merged).map(PGJSON.init) }),
                WrittenColumn("floor_clock", .copied, states.map(RecordRow.storedFloor)),
                WrittenColumn("write_clock", .copied, states.map { $0.writeClock.map(StoredStamp.text) }),
                WrittenColumn("delete_clock", .copied, states.map { $0.deleteClock?.description }),
                WrittenColumn("updated_by", .copied, records.map(\.updatedBy), cast: "::uuid[]"),
                WrittenColumn("visibility", .copied, states.map(\.publicVisibility.rawValue)),
                WrittenColumn("public_id", .copied, states.map { $0.visibility?.publicID }),
                WrittenColumn("can_fork", .copied, states.map { $0.visibility?.canFork == true }),
                WrittenColumn("visibility_clock", .copied, states.map { $0.visibility?.clock.description }),
                WrittenColumn("listed", .copied, states.map { $0.visibility?.listed != false }),
                WrittenColumn("forked_from", .copied, states.map { $0.fork?.publicID }),
                WrittenColumn("fork_clock", .copied, states.map { $0.fork?.clock.description }),
                WrittenColumn("created_by", .copied, records.map { $0.creator?.text }),
                WrittenColumn("changed_by", .copied, rows.map(\.value.user.text)),
                WrittenColumn("changed_job", .copied, rows.map(\.value.job), cast: "::uuid[]"),
                WrittenColumn("author", .input, rows.map(\.value.author)),
                WrittenColumn("author_user", .input, rows.map(\.value.user)),
                WrittenColumn(
                    "blob_refs", .copied, blobRefs(rows, writes),
                    stored: "CASE WHEN s.blob_refs IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(s.blob_refs)) END"),
            ]
        }

        /// Each record's files (`blob_refs`) as a JSON array of hashes, or NULL when it counts towards none.
        private static func blobRefs(_ rows: [(key: SpaceKey, value: StateWrites.Record)], _ writes: StateWrites) -> [PGJSON?] {
            guard !writes.blobRefs.isEmpty else { return [PGJSON?](repeating: nil, count: rows.count) }
            return rows.map { row in
                writes.blobRefs[row.key].map { PGJSON(JSONWriter.string(.array($0.sorted().map { .string($0) }))) }
            }
        }
    }
}
