import Crypto
import Foundation
import SyncModels

public enum Digests {
    /// Lowercase hex SHA-256, e.g. to tell whether a retried request carries the same body.
    public static func sha256Hex(_ bytes: some DataProtocol) -> String {
        Hex.string(SHA256.hash(data: bytes))
    }
}
