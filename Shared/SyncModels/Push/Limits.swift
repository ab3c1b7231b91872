/// How much a request may hold: ops, bytes, nesting and lengths. The server refuses more
/// with a problem naming the limit, and both clients refuse it at the call.
public enum Limits {
    public static let maxOpsPerPush = 500
    public static let maxDataBytes = 262_144
    /// How deep a record's data may nest objects and arrays (its own object is level 1).
    public static let maxDataDepth = 64
    public static let maxBodyBytes = 1_048_576
    public static let maxUserIDLength = 128
    /// `if_version` stays below this: a version is a counter far from it, and a JSON double
    /// is an exact integer only below it.
    public static let maxIfVersion: Int64 = 9_000_000_000_000_000
    /// The longest tag a Discover filter matches (longer tags are shown, not indexed).
    public static let maxTagLength = 200
    /// The longest Discover search.
    public static let maxSearchLength = 200
    /// The most elements one add or remove names.
    public static let maxSetValues = 1000
    /// The longest field name an increment, add or remove names.
    public static let maxFieldNameLength = 256
}
