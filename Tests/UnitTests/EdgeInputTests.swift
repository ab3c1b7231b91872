import Foundation
import HTTPSupport
import ServiceSupport
import SyncModels
import Testing

/// Input that must be refused rather than altered on its way to PostgreSQL.
@Suite("Edge input")
struct EdgeInputTests {
    @Test(arguments: [
        ("2026-11-22T10:00:00Z", "2026-11-22T10:00:00.000Z"),
        ("2026-11-22T10:00:00.5+01:00", "2026-11-22T09:00:00.500Z"),
        ("2024-02-29t23:30:00-00:45", "2024-03-01T00:15:00.000Z"),
        ("0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.5-01:00", "9999-12-31T23:59:59.999Z"),
    ])
    func validTimesAreNormalizedToUTC(text: String, utc: String) {
        #expect(RFC3339.canonicalUTC(text) == utc)
    }

    @Test(arguments: [
        ("1763876841.123456", "2025-11-23T05:47:21.123Z"),
        ("1763876841.999999", "2025-11-23T05:47:21.999Z"),
        ("1763876841", "2025-11-23T05:47:21.000Z"),
        ("0.000000", "1970-01-01T00:00:00.000Z"),
        ("-0.5", "1969-12-31T23:59:59.500Z"),
        ("-1.000001", "1969-12-31T23:59:58.999Z"),
        ("951782400.5", "2000-02-29T00:00:00.500Z"),
    ])
    func epochSecondsAreFormattedLikeToChar(epoch: String, utc: String) {
        #expect(RFC3339.utc(epoch: epoch) == utc)
    }

    @Test func malformedEpochsAreNotTimes() {
        for text in ["", "x", "1.", "1.2.3", "1.1234567", "1e9", " 1"] { #expect(RFC3339.utc(epoch: text) == nil, "\(text)") }
    }

    @Test(arguments: [
        "2026-02-30T00:00:00Z", "2025-02-29T00:00:00Z", "2026-11-22T10:00:00+22:10", "0000-01-01T00:00:00Z",
        "2026-11-22T24:00:00Z", "2026-11-22T10:00:60Z", "2026-11-22", "2026-11-22T10:00:00",
        "2026-11-22T10:00:00.Z", "2026-13-01T00:00:00Z", "yesterday",
    ])
    func impossibleTimesAreRefused(text: String) {
        #expect(RFC3339.canonicalUTC(text) == nil)
    }

    @Test func invalidUTF8IsNotJSON() throws {
        #expect(throws: (any Error).self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: (any Error).self) { try JSONParser.parse(Array(#""\ud800""#.utf8)) }
        #expect(throws: (any Error).self) { try JSONParser.parse([0x22, 0x61, 0x5C, 0x6E, 0xFF, 0x22]) }
        #expect(try JSONParser.parse(Array(#""é\u00e9""#.utf8)) == .string("éé"))
        // Without escapes: ASCII taken as is, anything else validated.
        #expect(try JSONParser.parse(Array(#"{"plain":"ascii text","mixed":"crème brûlée 🍮"}"#.utf8))
            == .object(["plain": .string("ascii text"), "mixed": .string("crème brûlée 🍮")]))
        #expect(throws: (any Error).self) { try JSONParser.parse([0x22, 0x61, 0x62, 0x80, 0x22]) }  // lone continuation
        #expect(throws: (any Error).self) { try JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }  // encoded surrogate
        #expect(throws: (any Error).self) { try JSONParser.parse([0x22, 0xF0, 0x9F, 0x8D, 0x22]) }  // cut short
    }

    @Test func nulInDataIsRefusedNamingTheOp() throws {
        let body = #"{"device_id":"d","ops":[{"op_id":"0f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01","type":"upsert","collection":"c","id":"i","data":{"ok":1}},"#
            + #"{"op_id":"1f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01","type":"patch","collection":"c","id":"i","data":{"t":["a\u0000"]}}]}"#
        #expect(throws: ValidationFailure.self) { try PushValidation.parse(Data(body.utf8)) }
        do {
            _ = try PushValidation.parse(Data(body.utf8))
        } catch {
            #expect(error == .op(index: 1, pointer: "/ops/1/data", detail: "data must not contain the NUL character (\\u0000)"))
        }
        #expect(JSONValue.object(["k\u{0}": .int(1)]).containsNUL)
        #expect(!JSONValue.object(["k": .string("fine")]).containsNUL)
    }

    @Test func ifVersionHasOneBoundForIntegersAndDoubles() throws {
        func push(_ version: String) -> String {
            #"{"device_id":"d","ops":[{"op_id":"0f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01","type":"delete","collection":"c","id":"i","if_version":\#(version)}]}"#
        }
        #expect(try PushValidation.parse(Data(push("8999999999999999").utf8)).ops[0].ifVersion == 8_999_999_999_999_999)
        for refused in ["9000000000000000", "9000000000000000.0", "-1", "1.5"] {
            #expect(throws: ValidationFailure.self, "\(refused)") { try PushValidation.parse(Data(push(refused).utf8)) }
        }
    }

    @Test func plainTextHasNoControlCharacters() {
        #expect(Names.isPlainText("Jo's iPhone 🚤"))
        #expect(!Names.isPlainText("a\u{0}b"))
        #expect(!Names.isPlainText("a\nb"))
        #expect(!Names.isPlainText("a\u{7F}"))
    }

    @Test func timeOrderedIDsAreVersion7AndSortByTime() {
        let start = Date(timeIntervalSince1970: 1_795_521_600.735)
        let ids = (0..<50).map { UUID.timeOrdered(at: start.addingTimeInterval(Double($0) * 0.002)) }
        let texts = ids.map { $0.uuidString.lowercased() }
        #expect(texts.allSatisfy { Array($0)[14] == "7" && "89ab".contains(Array($0)[19]) }, "\(texts[0])")
        #expect(texts == texts.sorted(), "ids of later milliseconds sort later")
        #expect(texts[0].hasPrefix("01a20d6d-5cd"), "\(texts[0]): the first 48 bits are the Unix milliseconds")
        #expect(Set(texts).count == 50 && UUID.timeOrdered(at: start) != UUID.timeOrdered(at: start))
    }

    @Test func hexIsLowercaseTwoDigitsAByteAndRoundTrips() {
        #expect(Hex.string([0x00, 0x0F, 0xA5, 0xFF]) == "000fa5ff")
        #expect(Hex.string([UInt8]()) == "")
        let bytes = (0...255).map(UInt8.init)
        #expect(Hex.bytes(Hex.string(bytes)) == bytes)
    }

    @Test func base64URLIsFoundationsBase64InTheURLAlphabetUnpaddedAndRoundTrips() {
        for count in 0..<40 {
            let bytes = Data((0..<count).map { _ in UInt8.random(in: 0...255) })
            let foundation = bytes.base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.encode(bytes) == foundation)
            #expect(Base64URL.decode(foundation) == bytes)
            let decoded = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                initialized = Base64URL.decode(foundation.utf8, into: buffer) ? count : 0
            }
            #expect(decoded == Array(bytes))
        }
    }

    @Test func rateLimitsParse() {
        #expect(RateLimit("20/s,burst=40") == RateLimit(rate: 20, burst: 40))
        #expect(RateLimit("600/m") == RateLimit(rate: 10, burst: 10))
        #expect(RateLimit("off")?.isOff == true)
        #expect(RateLimit("20") == nil && RateLimit("0/s") == nil && RateLimit("5/s,burst=0") == nil)
    }

    @Test func tokenBucketsRefuseABurstThenRefill() {
        final class Clock: @unchecked Sendable { var now = 0.0 }
        let clock = Clock()
        let limiter = RateLimiter(RateLimit(rate: 2, burst: 3), clock: { clock.now })
        #expect((0..<3).allSatisfy { _ in limiter.acquire("a") == nil })
        #expect(limiter.acquire("a") == 1)
        #expect(limiter.acquire("b") == nil)  // another key is unaffected
        clock.now = 0.5
        #expect(limiter.acquire("a") == nil)
        #expect(limiter.acquire("a") != nil)
    }

    @Test func aBucketGivesWhatItHoldsToARequestOfManyItems() {
        final class Clock: @unchecked Sendable { var now = 0.0 }
        let clock = Clock()
        let limiter = RateLimiter(RateLimit(rate: 2, burst: 5), clock: { clock.now })
        #expect(limiter.take("a", upTo: 3) == 3)
        #expect(limiter.take("a", upTo: 3) == 2)
        #expect(limiter.take("a", upTo: 3) == 0)
        clock.now = 1
        #expect(limiter.take("a", upTo: 10) == 2)
        #expect(RateLimiter(RateLimit("off")!).take("a", upTo: 1_000) == 1_000)
    }

    /// Two requests at once may read the clock in one order and take the lock in the
    /// other: the later reading must not cost the earlier one a token.
    @Test func aClockReadingOlderThanTheBucketTakesNothingAway() {
        final class Clock: @unchecked Sendable { var now = 100.0 }
        let clock = Clock()
        let limiter = RateLimiter(RateLimit(rate: 1.0 / 60, burst: 2), clock: { clock.now })
        #expect(limiter.acquire("a") == nil)
        clock.now = 99.999
        #expect(limiter.acquire("a") == nil)
        #expect(limiter.acquire("a") != nil)
    }
}
