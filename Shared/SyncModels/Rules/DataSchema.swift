import Foundation

/// A compiled schema of the JSON Schema subset rules use (`type`, `properties`, `required`,
/// `enum`, `const`, `minimum`/`maximum`, `minLength`/`maxLength`, `pattern`, `items`,
/// `maxItems`, `additionalProperties`), plus `type: "file"` for a file reference
/// (`{"$blob": …}`) with optional `maxSize` and `contentTypes`. Patterns are compiled once,
/// here; a schema that no value can match is refused when compiled.
public final class DataSchema: Sendable {
    /// JSON types a value may have (nil: any).
    let types: JSONType?
    let properties: [String: DataSchema]
    let required: [String]
    let additional: Additional
    /// `enum` (or `const`, as one value): the values allowed.
    let allowed: [JSONValue]?
    let minimum: Double?
    let maximum: Double?
    let minLength: Int?
    let maxLength: Int?
    let pattern: Pattern?
    let items: DataSchema?
    let maxItems: Int?
    let maxSize: Int64?
    /// Media types a file may have, `image/*` matching a whole family.
    let contentTypes: [String]?

    enum Additional: Sendable {
        case allowed, forbidden
        case schema(DataSchema)
    }

    struct JSONType: OptionSet, Sendable {
        let rawValue: UInt8
        static let object = JSONType(rawValue: 1), array = JSONType(rawValue: 2), string = JSONType(rawValue: 4)
        static let number = JSONType(rawValue: 8), integer = JSONType(rawValue: 16), boolean = JSONType(rawValue: 32)
        static let null = JSONType(rawValue: 64), file = JSONType(rawValue: 128)

        static let names: [(String, JSONType)] = [
            ("object", .object), ("array", .array), ("string", .string), ("number", .number), ("integer", .integer),
            ("boolean", .boolean), ("null", .null), ("file", .file),
        ]
    }

    /// A compiled `pattern`. `NSRegularExpression` is immutable once made and documented as
    /// safe to use from several threads at once.
    final class Pattern: @unchecked Sendable {
        let source: String
        let expression: NSRegularExpression

        init(_ source: String) throws {
            self.source = source
            self.expression = try NSRegularExpression(pattern: source)
        }

        func matches(_ text: String) -> Bool {
            expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }
    }

    private init(
        types: JSONType?, properties: [String: DataSchema], required: [String], additional: Additional, allowed: [JSONValue]?,
        minimum: Double?, maximum: Double?, minLength: Int?, maxLength: Int?, pattern: Pattern?, items: DataSchema?,
        maxItems: Int?, maxSize: Int64?, contentTypes: [String]?
    ) {
        self.types = types
        self.properties = properties
        self.required = required
        self.additional = additional
        self.allowed = allowed
        self.minimum = minimum
        self.maximum = maximum
        self.minLength = minLength
        self.maxLength = maxLength
        self.pattern = pattern
        self.items = items
        self.maxItems = maxItems
        self.maxSize = maxSize
        self.contentTypes = contentTypes
    }

    /// Whether a value of this JSON type could match (the type keyword alone).
    func admits(_ type: JSONType) -> Bool { types.map { !$0.isDisjoint(with: type) } ?? true }

    /// The schema a property of an object matching this one must match: its own, or
    /// `additionalProperties`' (nil: the property may not be there at all).
    func schema(ofProperty name: String) -> DataSchema?? {
        if let schema = properties[name] { return .some(schema) }
        switch additional {
        case .allowed: return .some(nil)
        case .forbidden: return nil
        case .schema(let schema): return .some(schema)
        }
    }

    // MARK: - Validation

    /// Where `value` first breaks the schema: a JSON Pointer below the value ("" for the
    /// value itself) and what is wrong; nil when it matches.
    public func violation(of value: JSONValue) -> SchemaViolation? {
        violation(of: value, at: "")
    }

    func violation(of value: JSONValue, at path: String) -> SchemaViolation? {
        if let types, !Self.type(of: value, isIn: types) {
            let names = JSONType.names.filter { types.contains($0.1) }.map(\.0)
            return SchemaViolation(pointer: path, message: "must be of type \(names.joined(separator: " or "))")
        }
        if let allowed, !allowed.contains(where: { Self.equal($0, value) }) {
            return SchemaViolation(
                pointer: path,
                message: allowed.count == 1 ? "must be \(JSONWriter.string(allowed[0]))"
                    : "must be one of \(allowed.map { JSONWriter.string($0) }.joined(separator: ", "))")
        }
        switch value {
        case .int, .double:
            let number = Self.number(value)
            if let minimum, number < minimum { return SchemaViolation(pointer: path, message: "must be at least \(Self.text(minimum))") }
            if let maximum, number > maximum { return SchemaViolation(pointer: path, message: "must be at most \(Self.text(maximum))") }
        case .string(let text):
            let length = text.unicodeScalars.count
            if let minLength, length < minLength {
                return SchemaViolation(pointer: path, message: "must be at least \(minLength) characters long")
            }
            if let maxLength, length > maxLength {
                return SchemaViolation(pointer: path, message: "must be at most \(maxLength) characters long")
            }
            if let pattern, !pattern.matches(text) {
                return SchemaViolation(pointer: path, message: "must match the pattern \(pattern.source)")
            }
        case .array(let elements):
            if let maxItems, elements.count > maxItems {
                return SchemaViolation(pointer: path, message: "must hold at most \(maxItems) items")
            }
            if let items {
                for (index, element) in elements.enumerated() {
                    if let violation = items.violation(of: element, at: "\(path)/\(index)") { return violation }
                }
            }
        case .object(let fields):
            if let file = BlobReference(json: value), types?.contains(.file) == true {
                return fileViolation(file, at: path)
            }
            for name in required where fields[name] == nil {
                return SchemaViolation(pointer: path + "/" + RulesError.escaped(name), message: "is required")
            }
            for (name, field) in fields {
                let fieldPath = path + "/" + RulesError.escaped(name)
                switch schema(ofProperty: name) {
                case nil: return SchemaViolation(pointer: fieldPath, message: "is not a field of this schema")
                case .some(nil): continue
                case .some(let schema?): if let violation = schema.violation(of: field, at: fieldPath) { return violation }
                }
            }
        case .null, .bool:
            break
        }
        return nil
    }

    private func fileViolation(_ file: BlobReference, at path: String) -> SchemaViolation? {
        if let maxSize, file.size > maxSize {
            return SchemaViolation(pointer: path, message: "must be a file of at most \(maxSize) bytes")
        }
        if let contentTypes {
            let type = file.contentType.split(separator: ";")[0].trimmingCharacters(in: .whitespaces).lowercased()
            let family = type.split(separator: "/").first.map { "\($0)/*" }
            guard contentTypes.contains(where: { $0 == type || $0 == family }) else {
                return SchemaViolation(pointer: path, message: "must be a file of type \(contentTypes.joined(separator: " or "))")
            }
        }
        return nil
    }

    static func type(of value: JSONValue, isIn types: JSONType) -> Bool {
        switch value {
        case .null: return types.contains(.null)
        case .bool: return types.contains(.boolean)
        case .int: return types.contains(.number) || types.contains(.integer)
        case .double: return types.contains(.number) || (types.contains(.integer) && value.intValue != nil)
        case .string: return types.contains(.string)
        case .array: return types.contains(.array)
        case .object:
            return types.contains(.object) || (types.contains(.file) && BlobReference(json: value) != nil)
        }
    }

    /// JSON equality, where 1 and 1.0 are the same number.
    static func equal(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.int, .double), (.double, .int): return number(lhs) == number(rhs)
        default: return lhs == rhs
        }
    }

    static func number(_ value: JSONValue) -> Double {
        switch value {
        case .int(let integer): return Double(integer)
        case .double(let double): return double
        default: return .nan
        }
    }

    private static func text(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 9e15 ? String(Int64(number)) : String(number)
    }

    // MARK: - Compiling

    static let keywords: Set<String> = [
        "type", "properties", "required", "enum", "const", "minimum", "maximum", "minLength", "maxLength", "pattern",
        "items", "maxItems", "additionalProperties", "maxSize", "contentTypes", "title", "description",
    ]

    /// Compiles a schema found at `path` of the rules document.
    static func compile(_ value: JSONValue, at path: String) throws(RulesError) -> DataSchema {
        guard let keys = value.objectValue else { throw RulesError(path: path, "a schema must be an object") }
        try RulesError.refuseUnknownKeys(keys, allowed: keywords, at: path)
        let types = try compileTypes(keys["type"], at: path + "/type")
        var properties: [String: DataSchema] = [:]
        if let raw = keys["properties"] {
            guard let entries = raw.objectValue else { throw RulesError(path: path + "/properties", "properties must be an object") }
            for (name, schema) in entries {
                properties[name] = try compile(schema, at: path + "/properties/" + RulesError.escaped(name))
            }
        }
        var additional = Additional.allowed
        if let raw = keys["additionalProperties"] {
            switch raw {
            case .bool(let allowed): additional = allowed ? .allowed : .forbidden
            case .object: additional = .schema(try compile(raw, at: path + "/additionalProperties"))
            default: throw RulesError(path: path + "/additionalProperties", "additionalProperties must be a boolean or a schema")
            }
        }
        var required: [String] = []
        if let raw = keys["required"] {
            guard let names = raw.arrayValue else { throw RulesError(path: path + "/required", "required must be an array of field names") }
            for (index, name) in names.enumerated() {
                guard let field = name.stringValue else {
                    throw RulesError(path: "\(path)/required/\(index)", "a required field's name must be a string")
                }
                if properties[field] == nil, case .forbidden = additional {
                    throw RulesError(
                        path: "\(path)/required/\(index)",
                        "this schema never matches: '\(field)' is required but not among properties, and additionalProperties is false")
                }
                required.append(field)
            }
        }
        let minimum = try number(keys["minimum"], "minimum", at: path)
        let maximum = try number(keys["maximum"], "maximum", at: path)
        if let minimum, let maximum, minimum > maximum {
            throw RulesError(path: path + "/minimum", "this schema never matches: minimum is above maximum")
        }
        let minLength = try count(keys["minLength"], "minLength", at: path)
        let maxLength = try count(keys["maxLength"], "maxLength", at: path)
        if let minLength, let maxLength, minLength > maxLength {
            throw RulesError(path: path + "/minLength", "this schema never matches: minLength is above maxLength")
        }
        var pattern: Pattern?
        if let raw = keys["pattern"] {
            guard let source = raw.stringValue else { throw RulesError(path: path + "/pattern", "pattern must be a string") }
            do {
                pattern = try Pattern(source)
            } catch {
                throw RulesError(path: path + "/pattern", "'\(source)' is not a valid regular expression")
            }
        }
        let items = try keys["items"].map { (raw) throws(RulesError) in try compile(raw, at: path + "/items") }
        let maxItems = try count(keys["maxItems"], "maxItems", at: path)
        let maxSize = try count(keys["maxSize"], "maxSize", at: path).map(Int64.init)
        var contentTypes: [String]?
        if let raw = keys["contentTypes"] {
            guard let names = raw.arrayValue, !names.isEmpty else {
                throw RulesError(path: path + "/contentTypes", "contentTypes must be a non-empty array of media types (image/png, image/*)")
            }
            contentTypes = try names.enumerated().map { (index, name) throws(RulesError) in
                guard let text = name.stringValue?.lowercased(), BlobReference.isValidContentType(text) || text.hasSuffix("/*") else {
                    throw RulesError(path: "\(path)/contentTypes/\(index)", "a media type such as image/png or image/*")
                }
                return text
            }
        }
        if maxSize != nil || contentTypes != nil, types != .file {
            throw RulesError(path: path + (maxSize != nil ? "/maxSize" : "/contentTypes"), "this applies to files only: type must be \"file\"")
        }
        var allowed: [JSONValue]?
        if let raw = keys["enum"] {
            guard let values = raw.arrayValue, !values.isEmpty else {
                throw RulesError(path: path + "/enum", "this schema never matches: enum must be a non-empty array")
            }
            allowed = values
        }
        if let constant = keys["const"] {
            if let values = allowed, !values.contains(where: { equal($0, constant) }) {
                throw RulesError(path: path + "/const", "this schema never matches: const is not among enum")
            }
            allowed = [constant]
        }
        let schema = DataSchema(
            types: types, properties: properties, required: required, additional: additional, allowed: nil,
            minimum: minimum, maximum: maximum, minLength: minLength, maxLength: maxLength, pattern: pattern, items: items,
            maxItems: maxItems, maxSize: maxSize, contentTypes: contentTypes)
        guard let allowed else { return schema }
        // The listed values must leave something the rest of the schema lets through.
        let matching = allowed.filter { schema.violation(of: $0) == nil }
        guard !matching.isEmpty else {
            throw RulesError(
                path: path + (keys["const"] != nil ? "/const" : "/enum"),
                "this schema never matches: no listed value matches the rest of the schema")
        }
        return DataSchema(
            types: types, properties: properties, required: required, additional: additional, allowed: allowed,
            minimum: minimum, maximum: maximum, minLength: minLength, maxLength: maxLength, pattern: pattern, items: items,
            maxItems: maxItems, maxSize: maxSize, contentTypes: contentTypes)
    }

    private static func compileTypes(_ raw: JSONValue?, at path: String) throws(RulesError) -> JSONType? {
        guard let raw else { return nil }
        let names: [JSONValue]
        switch raw {
        case .string: names = [raw]
        case .array(let list):
            guard !list.isEmpty else { throw RulesError(path: path, "this schema never matches: type is an empty list") }
            names = list
        default: throw RulesError(path: path, "type must be a type name or an array of them")
        }
        var types = JSONType()
        for name in names {
            guard let text = name.stringValue, let type = JSONType.names.first(where: { $0.0 == text })?.1 else {
                throw RulesError(
                    path: path, "unknown type \(JSONWriter.string(name)); one of \(JSONType.names.map(\.0).joined(separator: ", "))")
            }
            types.insert(type)
        }
        return types
    }

    private static func number(_ raw: JSONValue?, _ name: String, at path: String) throws(RulesError) -> Double? {
        guard let raw else { return nil }
        switch raw {
        case .int, .double: return Self.number(raw)
        default: throw RulesError(path: path + "/" + name, "\(name) must be a number")
        }
    }

    private static func count(_ raw: JSONValue?, _ name: String, at path: String) throws(RulesError) -> Int? {
        guard let raw else { return nil }
        guard let value = raw.intValue, value >= 0, value <= Int64(Int32.max) else {
            throw RulesError(path: path + "/" + name, "\(name) must be a whole number, 0 or more")
        }
        return Int(value)
    }
}

/// Where a value breaks a schema: a JSON Pointer below the value checked, and what is wrong.
public struct SchemaViolation: Equatable, Sendable {
    public let pointer: String
    public let message: String
}
