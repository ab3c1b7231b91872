import Foundation
import SyncModels

/// The app's rules as a device holds them: the document last fetched (`GET /v1/rules`),
/// kept in the store with its ETag so that they hold offline, compiled by the server's own
/// code, and the device's role in its space. A write they refuse for that role is refused
/// at the call; what needs the stored record is the server's to judge.
struct HeldRules: Sendable {
    let rules: Rules?
    /// nil: not known yet (a shared space before the first lookup): only what no role decides is checked.
    let role: SpaceRole?

    /// What the store keeps (meta `rules`): the document as the server answered it, and its ETag.
    struct Stored: Codable {
        let document: String
        let etag: String?
    }

    /// The rules kept in `store`; a personal space's writer is its owner.
    static func read(_ store: LocalStore, space: String?) throws -> HeldRules {
        let role = space == nil ? SpaceRole.owner : try store.meta("role").flatMap(SpaceRole.init(rawValue:))
        guard let text = try store.meta("rules"), let stored = try? JSONCoding.decode(Stored.self, from: Data(text.utf8)),
              let document = try? JSONParser.parse(Data(stored.document.utf8))
        else { return HeldRules(rules: nil, role: role) }
        // A document this build cannot read (from a newer server) checks nothing here: the server judges anyway.
        let version = document.objectValue?["version"]?.intValue ?? 0
        return HeldRules(rules: try? Rules.compile(document, version: version), role: role)
    }

    var version: Int64 { rules?.version ?? 0 }

    /// What the rules refuse of `op` for this device's role. Whether a collection has a
    /// hook is the server's to know (clients are not given hooks): a call is never refused
    /// here for want of one.
    func screen(_ op: Op) -> RuleRefusal? {
        guard let rules, let refusal = rules.screen(op, role: role ?? .owner) else { return nil }
        if refusal.rule.hasSuffix(".hook") { return nil }
        // Without a role, the checks no role decides: judged as an owner's write, the rights left out.
        if role == nil, refusal.rule.contains(".write.") { return nil }
        return refusal
    }

    /// The set-aside reason of an op a rule refused: `rule:recipes.schema`.
    static func reason(_ rule: String) -> String { PushAnswer.ruleReason(rule) }
}
