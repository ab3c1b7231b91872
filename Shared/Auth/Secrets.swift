import Crypto
import SyncModels

/// Random secrets, e.g. a device's webhook signing secret.
public enum Secrets {
    public static func random(bytes: Int = 32) -> String {
        let key = SymmetricKey(size: .init(bitCount: bytes * 8))
        return key.withUnsafeBytes { Hex.string($0) }
    }
}
