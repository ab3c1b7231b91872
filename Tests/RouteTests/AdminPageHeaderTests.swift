import Foundation
import Testing
import TestSupport

/// The admin page as a browser gets it.
@Suite(.timeLimit(.minutes(1)), .enabled(if: InProcessGateway.enabled, "needs DATABASE_URL and AMQP_URL"))
struct AdminPageHeaderTests {
    /// No other origin may frame the page (a replay or discard button clicked through a
    /// page on top), and what it says of the token is what it does.
    @Test func thePageCannotBeFramedAndSaysWhereItsTokenLives() async throws {
        try await InProcessGateway.with { api in
            for path in ["/admin", "/admin/support"] {
                let page = try await api.request("GET", path)
                #expect(page.status == 200)
                #expect(page.header("X-Frame-Options") == "DENY")
                #expect(page.header("X-Content-Type-Options") == "nosniff")
                #expect(page.header("Referrer-Policy") == "no-referrer")
                #expect(page.header("Cache-Control") == "no-store")
                #expect(page.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
                #expect(page.text.contains("kept in this page's memory only") && !page.text.contains("session storage"), "\(path)")
            }
        }
    }
}
