import Foundation
import PQBridge
import Persistence
import SyncModels
import Yams

/// The app's rules as operators handle them, in one place for the gateway's admin API and
/// for syncctl: a document read from JSON or YAML and compiled (so checked whole) before it
/// is stored as the next version; the current one and the history.
public struct RulesBook: Sendable {
    let store: RulesStore

    public init(pool: PGPool) { self.store = RulesStore(pool: pool) }

    public enum Format: Sendable {
        case json, yaml
    }

    /// Reads and compiles a document; a wrong one throws its first error with its path and,
    /// for YAML, its line. Nothing is stored.
    public static func read(_ text: String, format: Format) throws(RulesError) -> Rules {
        switch format {
        case .json:
            let document: JSONValue
            do {
                document = try JSONParser.parse(Data(text.utf8))
            } catch {
                throw RulesError(path: "", "the document is not valid JSON")
            }
            return try Rules.compile(document, version: 0)
        case .yaml:
            let tree = try YAMLTree(text)
            do {
                return try Rules.compile(tree.value, version: 0)
            } catch let error {
                var located = error
                located.line = tree.line(of: error.path)
                throw located
            }
        }
    }

    /// Stores a checked document as the next version, with who applied it (in the audit
    /// log too); returns the version.
    public func apply(_ text: String, format: Format, actor: String) async throws -> Int64 {
        let rules = try Self.read(text, format: format)
        return try await store.save(rules, appliedBy: actor)
    }

    public func current() async throws -> Rules { try await store.current() }

    public func history(limit: Int) async throws -> [RulesVersion] { try await store.history(limit: limit) }
}

/// A YAML document as the JSON tree it stands for, with the line of every node, so that an
/// error found by its JSON Pointer can name its line.
struct YAMLTree {
    let value: JSONValue
    private var lines: [String: Int] = [:]

    init(_ text: String) throws(RulesError) {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw RulesError(path: "", "the document is not valid YAML: \(error)")
        }
        guard let root else { throw RulesError(path: "", "the document is empty") }
        var lines: [String: Int] = [:]
        value = try Self.convert(root, at: "", lines: &lines)
        self.lines = lines
    }

    /// The line of the node at `path`, or of its nearest ancestor that has one.
    func line(of path: String) -> Int? {
        var pointer = Substring(path)
        while true {
            if let line = lines[String(pointer)] { return line }
            guard let slash = pointer.lastIndex(of: "/") else { return nil }
            pointer = pointer[..<slash]
        }
    }

    private static func convert(_ node: Node, at path: String, lines: inout [String: Int]) throws(RulesError) -> JSONValue {
        if let mark = node.mark { lines[path] = mark.line }
        switch node {
        case .scalar(let scalar):
            // The resolved tag (a quoted scalar is always a string).
            switch Tag.Name(rawValue: node.tag.description) {
            case .null: return .null
            case .bool: return node.bool.map(JSONValue.bool) ?? .string(scalar.string)
            case .int: return node.int.map { .int(Int64($0)) } ?? .string(scalar.string)
            case .float:
                guard let number = node.float, number.isFinite else {
                    throw RulesError(path: path, "\(scalar.string) is not a finite number", line: node.mark?.line)
                }
                return .double(number)
            default: return .string(scalar.string)
            }
        case .sequence(let sequence):
            var items: [JSONValue] = []
            for (index, item) in sequence.enumerated() { items.append(try convert(item, at: "\(path)/\(index)", lines: &lines)) }
            return .array(items)
        case .mapping(let mapping):
            var fields: [String: JSONValue] = [:]
            for (key, value) in mapping {
                guard let name = key.scalar?.string else {
                    throw RulesError(path: path, "a key must be a plain name", line: key.mark?.line)
                }
                let child = path + "/" + name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
                guard fields[name] == nil else { throw RulesError(path: child, "the key '\(name)' appears twice", line: key.mark?.line) }
                if let mark = key.mark { lines[child] = mark.line }
                fields[name] = try convert(value, at: child, lines: &lines)
            }
            return .object(fields)
        }
    }
}
