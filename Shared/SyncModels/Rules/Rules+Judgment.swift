/// An op the rules refuse: the rule's name (`recipes.schema`, `recipes.write.delete`,
/// `recipes.fields.price`, `recipes.immutable.kind`, `default`), where in the op (a JSON
/// Pointer below the op: `/data/title`, `/type`) and what is wrong, for people.
public struct RuleRefusal: Error, Equatable, Sendable {
    public let rule: String
    public let pointer: String
    public let detail: String

    public init(rule: String, pointer: String, detail: String) {
        self.rule = rule
        self.pointer = pointer
        self.detail = detail
    }
}

extension Rules {
    /// What the op and the writer's role decide, before any record is read (the gateway at
    /// intake, a client at the call): the collection's default, the op type's right, and
    /// the data's shape. What needs the stored record (the author, immutable fields, rights
    /// on fields) waits for `judge`.
    public func screen(_ op: Op, role: SpaceRole) -> RuleRefusal? {
        guard let collection = collections[op.collection] else {
            if !allowsUnnamed {
                return RuleRefusal(
                    rule: "default", pointer: "/collection", detail: "the rules name no collection '\(op.collection)' and refuse the others")
            }
            return op.type == .call ? Self.noHook(op.collection) : nil
        }
        if op.type == .call, collection.hook == nil { return Self.noHook(op.collection) }
        if collection.right(for: op.type).decision(for: role, isAuthor: nil) == .refused {
            return collection.writeRefusal(op.type, role: role)
        }
        if let field = op.field, let schema = collection.schema, let refusal = collection.mergedFieldRefusal(op, field: field, schema: schema) {
            return refusal
        }
        guard let schema = collection.schema, let data = op.data else { return nil }
        switch op.type {
        case .upsert:
            return schema.violation(of: .object(data)).map { collection.schemaRefusal($0) }
        case .patch:
            for (name, value) in data {
                let pointer = "/" + RulesError.escaped(name)
                if value.isNull {
                    if schema.required.contains(name) {
                        return collection.schemaRefusal(SchemaViolation(pointer: pointer, message: "is required and cannot be removed"))
                    }
                    continue
                }
                switch schema.schema(ofProperty: name) {
                case nil:
                    return collection.schemaRefusal(SchemaViolation(pointer: pointer, message: "is not a field of this schema"))
                case .some(nil):
                    continue
                case .some(let property?):
                    if let violation = property.violation(of: value, at: pointer) { return collection.schemaRefusal(violation) }
                }
            }
            return nil
        default:
            return nil
        }
    }

    /// Everything the rules say about the op, when it is applied under the record's lock:
    /// what `screen` checks (the rules may have changed since intake), then what needs the
    /// record as stored: the op type's right for an author, fields fixed at creation, and who may change which
    /// field. `user` pushed the op; `record` is the record before it (nil: none);
    /// `copied` is what a fork copies into the record. A field is changed when the op
    /// would give it another value than it holds (or remove it); writing the value it
    /// already has changes nothing.
    public func judge(_ op: Op, record: StoredRecord?, role: SpaceRole, user: UserID, copied: [String: JSONValue]? = nil) -> RuleRefusal? {
        if let refusal = screen(op, role: role) { return refusal }
        guard let collection = collections[op.collection] else { return nil }
        let live = record?.state.hasData == true
        // A record with no data yet becomes its writer's: they would be its author.
        let isAuthor = record?.creator.map { $0 == user } ?? !live
        if collection.right(for: op.type).decision(for: role, isAuthor: isAuthor) != .allowed {
            return collection.writeRefusal(op.type, role: role)
        }
        if op.type == .fork, let schema = collection.schema, let copied, let violation = schema.violation(of: .object(copied)) {
            return collection.schemaRefusal(violation)
        }
        // An increment, add or remove is judged by the value it leaves: a counter may not go
        // below its schema's minimum, a set may not hold more than its maxItems.
        var merged: [String: JSONValue]?
        if let field = op.field, [.increment, .add, .remove].contains(op.type) {
            var state = record?.state ?? RecordState()
            state.apply(op)
            merged = state.fields
            if let schema = collection.schema, case .some(let property?) = schema.schema(ofProperty: field),
               let value = state.fields[field], let violation = property.violation(of: value, at: "/" + RulesError.escaped(field)) {
                return collection.schemaRefusal(violation, pointer: "/field")
            }
        }
        guard op.type == .upsert || op.type == .patch || op.type == .fork || merged != nil else { return nil }
        guard !collection.immutable.isEmpty || !collection.fields.isEmpty else { return nil }
        let before = live ? record?.state.fields ?? [:] : [:]
        func after(_ field: String) -> JSONValue? {
            if let merged { return merged[field] }
            switch op.type {
            case .patch:
                guard let value = op.data?[field] else { return before[field] }
                return value.isNull ? nil : value
            case .fork: return copied?[field]
            default: return op.data?[field]
            }
        }
        func changes(_ field: String) -> Bool {
            switch (before[field], after(field)) {
            case (nil, nil): return false
            case (let old?, let new?): return !DataSchema.equal(old, new)
            default: return true
            }
        }
        if live {
            for field in collection.immutable.sorted() where changes(field) {
                return RuleRefusal(
                    rule: "\(collection.name).immutable.\(field)", pointer: merged != nil ? "/field" : "/data/" + RulesError.escaped(field),
                    detail: "'\(field)' is set when the record is created and never changed after")
            }
        }
        for (field, roles) in collection.fields.sorted(by: { $0.key < $1.key })
        where roles.decision(for: role, isAuthor: isAuthor) != .allowed && changes(field) {
            return RuleRefusal(
                rule: "\(collection.name).fields.\(field)", pointer: merged != nil ? "/field" : "/data/" + RulesError.escaped(field),
                detail: "'\(field)' may be changed only by \(roles.names)")
        }
        return nil
    }
}

extension Rules {
    static func noHook(_ collection: String) -> RuleRefusal {
        RuleRefusal(rule: "\(collection).hook", pointer: "/collection", detail: "the rules give \(collection) no hook to answer calls")
    }

    /// Whether `screen` must see these ops even when the rules refuse nothing else: a call
    /// needs a hook, which no rules mean none.
    public func mustScreen(_ ops: [Op]) -> Bool {
        refusesAnything || ops.contains { $0.type == .call }
    }
}

extension Rules.CollectionRules {
    func right(for type: OpType) -> RoleSet { write[type] ?? .writers }

    func writeRefusal(_ type: OpType, role: SpaceRole) -> RuleRefusal {
        let roles = right(for: type)
        return RuleRefusal(
            rule: "\(name).write.\(type.rawValue)", pointer: "/type",
            detail: roles.isEmpty ? "no one may \(type.rawValue) in \(name)"
                : "in \(name), only \(roles.names) may \(type.rawValue); this writer is \(role == .owner ? "an" : "a") \(role.rawValue)")
    }

    /// `pointer`: where in the op (the default: where in its data).
    func schemaRefusal(_ violation: SchemaViolation, pointer: String? = nil) -> RuleRefusal {
        let field = violation.pointer.isEmpty ? "data" : String(violation.pointer.dropFirst())
        return RuleRefusal(
            rule: "\(name).schema", pointer: pointer ?? "/data" + violation.pointer, detail: "\(field) \(violation.message)")
    }

    /// What the schema says of an increment, add or remove before the record is read: the
    /// field must be one of the schema's, a counter's a number, a set's an array whose
    /// items admit each value. (A minimum or maxItems needs the record: `judge`.)
    func mergedFieldRefusal(_ op: Op, field: String, schema: DataSchema) -> RuleRefusal? {
        let pointer = "/" + RulesError.escaped(field)
        switch schema.schema(ofProperty: field) {
        case nil:
            return schemaRefusal(SchemaViolation(pointer: pointer, message: "is not a field of this schema"), pointer: "/field")
        case .some(nil):
            return nil
        case .some(let property?):
            if op.type == .increment {
                guard property.admits(.number) || property.admits(.integer) else {
                    return schemaRefusal(SchemaViolation(pointer: pointer, message: "is not a number: it cannot be incremented"), pointer: "/field")
                }
                if op.by?.intValue == nil, !property.admits(.number) {
                    return schemaRefusal(SchemaViolation(pointer: pointer, message: "must be an integer: by must be one"), pointer: "/by")
                }
                return nil
            }
            guard property.admits(.array) else {
                return schemaRefusal(SchemaViolation(pointer: pointer, message: "is not an array: it cannot hold a set"), pointer: "/field")
            }
            guard op.type == .add, let items = property.items else { return nil }
            for (index, value) in (op.values ?? []).enumerated() {
                if let violation = items.violation(of: value, at: "\(pointer)/\(index)") {
                    return schemaRefusal(violation, pointer: "/values/\(index)")
                }
            }
            return nil
        }
    }
}

extension RoleSet {
    /// "owner or author", for people.
    var names: String {
        let names = [(RoleSet.owner, "owner"), (.editor, "editor"), (.author, "the record's author"), (.service, "the app's backend")].filter { contains($0.0) }.map(\.1)
        return names.isEmpty ? "no one" : names.joined(separator: " or ")
    }
}
