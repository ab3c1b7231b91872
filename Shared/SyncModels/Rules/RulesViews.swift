/// One stored version of the rules, as `syncctl rules history` and the admin API list it.
public struct RulesVersion: Codable, Sendable, Equatable {
    public var version: Int64
    public var appliedBy: String
    public var appliedAt: String
    /// The collections the document names.
    public var collections: [String]

    public init(version: Int64, appliedBy: String, appliedAt: String, collections: [String]) {
        self.version = version
        self.appliedBy = appliedBy
        self.appliedAt = appliedAt
        self.collections = collections
    }

    enum CodingKeys: String, CodingKey {
        case version, appliedBy = "applied_by", appliedAt = "applied_at", collections
    }
}

extension Rules {
    /// The document with its `version`: what `GET /v1/rules` and `GET /v1/admin/rules` answer.
    public var versionedDocument: JSONValue {
        var fields = document.objectValue ?? [:]
        fields["version"] = .int(version)
        return .object(fields)
    }

    /// What clients are given (`GET /v1/rules`): the document without its hooks, whose
    /// addresses and secrets are the app's backend's.
    public var clientDocument: JSONValue {
        guard case .object(var fields) = versionedDocument, case .object(var collections)? = fields["collections"] else {
            return versionedDocument
        }
        for (name, rules) in collections {
            guard case .object(var entries) = rules, entries["hook"] != nil else { continue }
            entries["hook"] = nil
            collections[name] = .object(entries)
        }
        fields["collections"] = .object(collections)
        return .object(fields)
    }

    /// The strong validator of `versionedDocument`: one version, one document.
    public var entityTag: String { "\"rules-\(version)\"" }
}
