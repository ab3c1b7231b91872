import Foundation

/// The app's rules for a deployment, compiled once per version: per collection the shape of
/// its data, who may use which op type, who may change which field, and the fields fixed at
/// creation; `default` for the collections it does not name. The hot path (intake and
/// apply) evaluates this form, never the document.
///
/// With no document loaded the rules are `Rules.none`: version 0, every collection allowed,
/// so everything behaves as before rules existed.
public struct Rules: Sendable {
    /// The stored version (0: no document was ever loaded).
    public let version: Int64
    /// The document as loaded, normalized to JSON (what `GET /v1/admin/rules` answers).
    public let document: JSONValue
    /// Whether a collection the document does not name may be written.
    public let allowsUnnamed: Bool
    public let collections: [String: CollectionRules]

    public static let none = Rules(version: 0, document: Rules.emptyDocument, allowsUnnamed: true, collections: [:])

    static let emptyDocument: JSONValue = .object(["default": .string("allow"), "collections": .object([:])])

    /// Whether these rules can refuse anything at all: false for `none` and for a document
    /// that names nothing and allows the rest, so the hot path skips them.
    public var refusesAnything: Bool { !allowsUnnamed || !collections.isEmpty }

    /// What the rules say about one collection.
    public struct CollectionRules: Sendable {
        public let name: String
        /// The shape of `data`; nil: any object.
        public let schema: DataSchema?
        /// Who may use each op type; an op type absent here keeps the roles' own rule.
        public let write: [OpType: RoleSet]
        /// Who may change each of these fields, in any op.
        public let fields: [String: RoleSet]
        /// Fields set at creation and never changed after.
        public let immutable: Set<String>
        /// The app's backend that answers this collection's `call` ops.
        public let hook: Hook?
    }

    /// A server mutator's endpoint: where the worker posts a job's calls, and the secret
    /// their signature is made with.
    public struct Hook: Sendable, Equatable {
        public let url: String
        public let secret: String
        /// How long an answer may take before the attempt fails (default 5 s).
        public let timeout: Double

        public static let minimumSecretBytes = 16
    }

    /// Compiles a document (already parsed from JSON or YAML) as `version`; a wrong document
    /// throws the first error with its path (`/collections/recipes/schema/minLength`).
    public static func compile(_ document: JSONValue, version: Int64) throws(RulesError) -> Rules {
        guard let root = document.objectValue else { throw RulesError(path: "", "the rules document must be an object") }
        // `version` is what `GET` adds: a document read back can be applied again as it is.
        try RulesError.refuseUnknownKeys(root, allowed: ["default", "collections", "version"], at: "")
        if let version = root["version"], (version.intValue ?? -1) < 0 {
            throw RulesError(path: "/version", "version, when given, must be a whole number, 0 or more (it is ignored: applying makes the next one)")
        }
        var allowsUnnamed = true
        if let policy = root["default"] {
            switch policy.stringValue {
            case "allow": allowsUnnamed = true
            case "deny": allowsUnnamed = false
            default: throw RulesError(path: "/default", "default must be \"allow\" or \"deny\"")
            }
        }
        var collections: [String: CollectionRules] = [:]
        if let named = root["collections"] {
            guard let named = named.objectValue else { throw RulesError(path: "/collections", "collections must be an object") }
            for (name, rules) in named {
                let path = "/collections/\(RulesError.escaped(name))"
                guard Names.isValidCollection(name) else {
                    throw RulesError(path: path, "a collection's name must match ^[a-z][a-z0-9_]{0,63}$")
                }
                collections[name] = try compileCollection(name, rules, at: path)
            }
        }
        var normalized = root
        normalized["version"] = nil
        normalized["default"] = .string(allowsUnnamed ? "allow" : "deny")
        if normalized["collections"] == nil { normalized["collections"] = .object([:]) }
        return Rules(version: version, document: .object(normalized), allowsUnnamed: allowsUnnamed, collections: collections)
    }

    private static func compileCollection(_ name: String, _ value: JSONValue, at path: String) throws(RulesError) -> CollectionRules {
        guard let fields = value.objectValue else { throw RulesError(path: path, "a collection's rules must be an object") }
        try RulesError.refuseUnknownKeys(fields, allowed: ["schema", "write", "immutable", "hook"], at: path)
        var schema: DataSchema?
        if let raw = fields["schema"] {
            let compiled = try DataSchema.compile(raw, at: path + "/schema")
            guard compiled.admits(.object) else {
                throw RulesError(path: path + "/schema/type", "this schema never matches: a record's data is always an object")
            }
            schema = compiled
        }
        var write: [OpType: RoleSet] = [:]
        var fieldRights: [String: RoleSet] = [:]
        if let raw = fields["write"] {
            guard let entries = raw.objectValue else { throw RulesError(path: path + "/write", "write must be an object") }
            for (key, roles) in entries {
                let entryPath = path + "/write/" + RulesError.escaped(key)
                if key == "fields" {
                    guard let perField = roles.objectValue else { throw RulesError(path: entryPath, "fields must be an object") }
                    for (field, roles) in perField {
                        fieldRights[field] = try RoleSet.compile(roles, at: entryPath + "/" + RulesError.escaped(field))
                    }
                } else if let type = OpType(rawValue: key) {
                    write[type] = try RoleSet.compile(roles, at: entryPath)
                } else {
                    throw RulesError(
                        path: entryPath,
                        "unknown key '\(key)': write takes op types (\(OpType.allCases.map(\.rawValue).joined(separator: ", "))) and fields")
                }
            }
        }
        var immutable = Set<String>()
        if let raw = fields["immutable"] {
            guard let names = raw.arrayValue else { throw RulesError(path: path + "/immutable", "immutable must be an array of field names") }
            for (index, name) in names.enumerated() {
                guard let field = name.stringValue, !field.isEmpty else {
                    throw RulesError(path: path + "/immutable/\(index)", "a field name must be a non-empty string")
                }
                immutable.insert(field)
            }
        }
        let hook = try fields["hook"].map { (raw) throws(RulesError) in try compileHook(raw, at: path + "/hook") }
        return CollectionRules(name: name, schema: schema, write: write, fields: fieldRights, immutable: immutable, hook: hook)
    }

    private static func compileHook(_ value: JSONValue, at path: String) throws(RulesError) -> Hook {
        guard let fields = value.objectValue else { throw RulesError(path: path, "a hook is an object: url, secret, timeout") }
        try RulesError.refuseUnknownKeys(fields, allowed: ["url", "secret", "timeout"], at: path)
        guard let url = fields["url"]?.stringValue, let components = URLComponents(string: url),
              let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
              let host = components.host, !host.isEmpty, Names.isPlainText(url)
        else { throw RulesError(path: path + "/url", "url must be an https (or http) URL") }
        guard let secret = fields["secret"]?.stringValue, secret.utf8.count >= Hook.minimumSecretBytes, Names.isPlainText(secret) else {
            throw RulesError(path: path + "/secret", "secret must be text of at least \(Hook.minimumSecretBytes) bytes")
        }
        var timeout = 5.0
        if let raw = fields["timeout"] {
            guard let seconds = Durations.parse(raw.stringValue ?? ""), (0.1...60).contains(seconds) else {
                throw RulesError(path: path + "/timeout", "timeout must be a duration from 100ms to 60s, such as 5s")
            }
            timeout = seconds
        }
        return Hook(url: url, secret: secret, timeout: timeout)
    }
}

/// Roles a write rule lets through: `owner`, `editor`, and `author` (the user whose op
/// created the record). A viewer never writes, whatever the rules say.
public struct RoleSet: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let owner = RoleSet(rawValue: 1)
    public static let editor = RoleSet(rawValue: 2)
    public static let author = RoleSet(rawValue: 4)
    /// The app's backend (a service token). A right that does not name it lets it write
    /// as an owner may.
    public static let service = RoleSet(rawValue: 8)
    /// Who may write when no rule says otherwise.
    public static let writers: RoleSet = [.owner, .editor]

    static func compile(_ value: JSONValue, at path: String) throws(RulesError) -> RoleSet {
        guard let names = value.arrayValue else {
            throw RulesError(path: path, "a write rule is an array of roles (owner, editor, author, service)")
        }
        var roles = RoleSet()
        for (index, name) in names.enumerated() {
            switch name.stringValue {
            case "owner": roles.insert(.owner)
            case "editor": roles.insert(.editor)
            case "author": roles.insert(.author)
            case "service": roles.insert(.service)
            case "viewer":
                throw RulesError(path: "\(path)/\(index)", "a viewer never writes: rules only narrow what roles allow")
            default:
                throw RulesError(path: "\(path)/\(index)", "a role must be owner, editor, author or service")
            }
        }
        return roles
    }

    /// Whether a member with `role` may write, when `isAuthor` says whether they created
    /// the record (nil: not known yet, before the record is read).
    func decision(for role: SpaceRole, isAuthor: Bool?) -> Decision {
        switch role {
        case .viewer: return .refused
        case .owner where contains(.owner), .editor where contains(.editor): return .allowed
        case .service where contains(.service) || contains(.owner): return .allowed
        default:
            guard contains(.author) else { return .refused }
            switch isAuthor {
            case true?: return .allowed
            case false?: return .refused
            case nil: return .undecided
            }
        }
    }

    enum Decision { case allowed, refused, undecided }
}

/// Why a rules document was refused: the JSON Pointer of the first error in it (and, for
/// YAML, its line) and what is wrong there.
public struct RulesError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An RFC 6901 pointer into the document ("" is the whole document).
    public let path: String
    public let message: String
    /// The line of `path` in the YAML or JSON text, when the text was read with positions.
    public var line: Int?

    public init(path: String, _ message: String, line: Int? = nil) {
        self.path = path
        self.message = message
        self.line = line
    }

    public var description: String {
        (path.isEmpty ? "the document" : path) + (line.map { " (line \($0))" } ?? "") + ": " + message
    }

    /// A key as one step of a JSON Pointer.
    static func escaped(_ key: String) -> String {
        key.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    static func refuseUnknownKeys(_ object: [String: JSONValue], allowed: Set<String>, at path: String) throws(RulesError) {
        if let unknown = object.keys.filter({ !allowed.contains($0) }).sorted().first {
            throw RulesError(
                path: path + "/" + escaped(unknown), "unknown key '\(unknown)'; allowed here: \(allowed.sorted().joined(separator: ", "))")
        }
    }
}
