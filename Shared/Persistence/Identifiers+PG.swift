import Foundation
import PQBridge
import SyncModels

/// An id is a `uuid` column and parameter.
extension Identifier: PGEncodable, PGDecodable, PGArrayElement {
    public static var pgType: PGType { UUID.pgType }
    public static var pgArrayType: PGType { UUID.pgArrayType }
    public func encode(into buffer: inout PGBuffer) { uuid.encode(into: &buffer) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        self.init(try UUID(pgBytes: bytes, type: type))
    }
}

/// A user's id is a `text` column and parameter.
extension UserID: PGEncodable, PGDecodable, PGArrayElement {
    public static var pgType: PGType { String.pgType }
    public static var pgArrayType: PGType { String.pgArrayType }
    public func encode(into buffer: inout PGBuffer) { text.encode(into: &buffer) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        self.init(try String(pgBytes: bytes, type: type))
    }
}
