import Foundation
import SyncModels

extension UserID {
    /// A user no other test run has: `prefix` and eight hex digits.
    public static func unique(_ prefix: String = "user") -> UserID {
        UserID("\(prefix)-\(UUID().uuidString.prefix(8).lowercased())")
    }
}
