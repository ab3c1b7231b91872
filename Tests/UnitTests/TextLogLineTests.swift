import Logging
import ServiceSupport
import Testing

/// Text log lines: a value a client chose cannot add fields or lines.
struct TextLogLineTests {
    func line(_ fields: Logger.Metadata, message: String = "request") -> String {
        TextLogLine.line(time: "T", level: .info, label: "syncline.gateway", fields: fields, source: "HTTPSupport", message: message)
    }

    @Test func plainValuesReadAsStreamLogHandlerWritesThem() {
        #expect(line(["user.id": "alice", "jobs.count": "3"]) == "T info syncline.gateway: jobs.count=3 user.id=alice [HTTPSupport] request\n")
    }

    @Test func aValueCannotForgeAFieldOrALine() {
        let forged = line(["user.id": "alice http.response.status_code=200", "path": "/x\nT error forged: [x] owned"])
        #expect(forged == #"T info syncline.gateway: path="/x\nT error forged: [x] owned" user.id="alice http.response.status_code=200" [HTTPSupport] request"# + "\n")
        #expect(forged.filter { $0 == "\n" }.count == 1)
        #expect(line(["user.id": #"a"b\c"#]) == #"T info syncline.gateway: user.id="a\"b\\c" [HTTPSupport] request"# + "\n")
        #expect(line(["empty": ""]) == #"T info syncline.gateway: empty="" [HTTPSupport] request"# + "\n")
    }

    @Test func aMessageCannotStartALine() {
        #expect(line([:], message: "bad\r\nT info x: [y] fake") == #"T info syncline.gateway: [HTTPSupport] bad\r\nT info x: [y] fake"# + "\n")
    }
}
