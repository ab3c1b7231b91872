import Foundation
import Persistence
import SyncModels
import Testing

@Suite struct StoredStampTests {
    private let node = "f53a6e6b-f734-44d9-a6f5-4e856cb1f9c5"
    private let op = "0f5d79d6-7cde-458f-bd56-a6fc376eb196"

    @Test func aStampOfUUIDsIsStoredIn56BytesAndReadBackExactly() {
        let stamp = Stamp(hlc: "1795792137559-00042-\(node)", opID: op)
        let stored = StoredStamp.text(stamp)
        #expect(stored.utf8.count == 56 && stored.hasPrefix("~"))
        #expect(StoredStamp.stamp(stored) == stamp)
    }

    @Test(arguments: [
        ("0000000000000-00000-00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"),
        ("9999999999999-99999-FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "ffffffff-ffff-ffff-ffff-ffffffffffff"),
        ("1763800000000-00001-F53A6E6B-F734-44D9-A6F5-4E856CB1F9C5", "0F5D79D6-7CDE-458F-BD56-A6FC376EB196"),
        ("1763800000000-00001-12345678-1234-1234-1234-123456789012", "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
    ])
    func theEdgesOfEachFieldAndEitherCaseReadBackExactly(hlc: String, opID: String) {
        let stamp = Stamp(hlc: hlc, opID: opID)
        let stored = StoredStamp.text(stamp)
        #expect(stored.hasPrefix("~"))
        #expect(StoredStamp.stamp(stored) == stamp)
    }

    @Test(arguments: [
        Stamp(hlc: "1763800000000-00001-d", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "1763800000000-00001-F53a6e6b-f734-44d9-a6f5-4e856cb1f9c5", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "1763800000000-00001-f53a6e6b-f734-44d9-a6f5-4e856cb1f9c5", opID: "op-1"),
        Stamp(hlc: "1763800000000-00001-f53a6e6bf73444d9a6f54e856cb1f9c5", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "1763800000000-00001-g53a6e6b-f734-44d9-a6f5-4e856cb1f9c5", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "1763800000000-00001-f53a6e6bf-734-44d9-a6f5-4e856cb1f9c5", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb196"),
        Stamp(hlc: "1763800000000-00001-f53a6e6b-f734-44d9-a6f5-4e856cb1f9c5", opID: "0f5d79d6-7cde-458f-bd56-a6fc376eb19 "),
    ])
    func anyOtherStampIsStoredAsItsText(stamp: Stamp) {
        #expect(StoredStamp.text(stamp) == stamp.description)
        #expect(StoredStamp.stamp(stamp.description) == Stamp(stored: stamp.description))
    }

    @Test func randomStampsReadBackExactly() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let hlc = HLC(milliseconds: Int64.random(in: 0...9_999_999_999_999, using: &generator),
                          counter: Int.random(in: 0...HLC.maxCounter, using: &generator),
                          node: UUID().uuidString.lowercased())!
            let stamp = Stamp(hlc: hlc.description, opID: Bool.random() ? UUID().uuidString : UUID().uuidString.lowercased())
            #expect(StoredStamp.stamp(StoredStamp.text(stamp)) == stamp)
        }
    }

    @Test(arguments: ["~", "~AAAA", "~" + String(repeating: "A", count: 54) + "*", "~" + String(repeating: "_", count: 55)])
    func aBrokenShortFormReadsAsNoStamp(stored: String) {
        #expect(StoredStamp.stamp(stored) == nil)
    }
}
