import Foundation
import SyncModels
import Testing

/// Ids of devices, spaces and jobs: read in any case, written in lowercase, ordered as that text.
struct IdentifierTests {
    @Test func anIDIsReadInAnyCaseAndWrittenInLowercase() throws {
        let upper = try #require(DeviceID("0F8FAD5B-D9CB-469F-A165-70867728950E"))
        let lower = try #require(DeviceID("0f8fad5b-d9cb-469f-a165-70867728950e"))
        #expect(upper == lower)
        #expect(upper.description == "0f8fad5b-d9cb-469f-a165-70867728950e")
        #expect(Set([upper, lower]).count == 1)
    }

    @Test func whatIsNotAUUIDIsNoID() {
        for text in ["", "device", "0f8fad5b-d9cb-469f-a165-70867728950", "0f8fad5b-d9cb-469f-a165-70867728950e0",
                     "0f8fad5bxd9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-70867728950g", " 0f8fad5b-d9cb-469f-a165-70867728950e"] {
            #expect(DeviceID(text) == nil, "\(text)")
        }
    }

    @Test func anIDTravelsAsItsLowercaseText() throws {
        let id = try #require(DeviceID("0F8FAD5B-D9CB-469F-A165-70867728950E"))
        let json = try JSONEncoder().encode(["device_id": id])
        #expect(String(decoding: json, as: UTF8.self) == #"{"device_id":"0f8fad5b-d9cb-469f-a165-70867728950e"}"#)
        #expect(try JSONDecoder().decode([String: DeviceID].self, from: json)["device_id"] == id)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([String: DeviceID].self, from: Data(#"{"device_id":"x"}"#.utf8)) }
    }

    /// Ids sort as their text does (and as PostgreSQL sorts `uuid`s): the worker locks rows
    /// in that order, as the statements' `ORDER BY` does.
    @Test func idsSortAsTheirText() {
        var generator = SystemRandomNumberGenerator()
        let ids = (0..<2000).map { _ in SpaceID(UUID()) }
            + ["00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "0a000000-0000-0000-0000-000000000000",
               "a0000000-0000-0000-0000-000000000000", "09ffffff-ffff-ffff-ffff-ffffffffffff"].compactMap { SpaceID($0) }
        #expect(ids.sorted().map(\.description) == ids.map(\.description).sorted())
        for _ in 0..<2000 {
            let (a, b) = (ids.randomElement(using: &generator)!, ids.randomElement(using: &generator)!)
            #expect((a < b) == (a.description < b.description), "\(a) \(b)")
        }
    }
}
