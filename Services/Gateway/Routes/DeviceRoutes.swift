import AMQPBridge
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Persistence
import ServiceSupport
import SyncModels

/// `POST/GET /v1/devices`, `DELETE /v1/devices/{device_id}`.
struct DeviceRoutes: Sendable {
    let devices: DeviceStore
    let publisher: AMQPPublisher
    let allowPrivateWebhooks: Bool

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/devices", use: create)
        routes.get("/v1/devices", use: list)
        routes.delete("/v1/devices/:device_id", use: revoke)
        return routes
    }

    @Sendable func create(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.body.collect(upTo: 64 * 1024)
        let registration = try DeviceRegistration.parse(Data(buffer: body), allowPrivateWebhooks: allowPrivateWebhooks)
        let device = try await devices.register(
            user: context.user, name: registration.name, platform: registration.platform,
            pushURL: registration.pushURL, pushSecret: Secrets.random())
        return try jsonResponse(device, status: .created)
    }

    @Sendable func list(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        return try jsonResponse(DeviceList(items: try await devices.list(user: context.user)))
    }

    @Sendable func revoke(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = DeviceID(try context.parameters.require("device_id")), try await devices.revoke(user: context.user, device: id) else {
            throw APIError.notFound("No such device.")
        }
        await publisher.announce(DeviceRevokedEvent(userID: context.user, deviceID: id.description), logger: context.logger)
        return Response(status: .noContent)
    }
}

struct DeviceRegistration {
    var name: String
    var platform: String
    var pushURL: String?

    static func parse(_ body: Data, allowPrivateWebhooks: Bool = false) throws(APIError) -> DeviceRegistration {
        guard let root = try? JSONParser.parse(body) else {
            throw .badRequest("The request body is not valid JSON.")
        }
        guard let fields = root.objectValue else { throw .unprocessable("The body must be a JSON object.") }
        guard let name = fields["name"]?.stringValue, (1...200).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            throw .unprocessable("name must be a string of 1 to 200 characters, without control characters.")
        }
        guard let platform = fields["platform"]?.stringValue, (1...50).contains(platform.unicodeScalars.count), Names.isPlainText(platform) else {
            throw .unprocessable("platform must be a string of 1 to 50 characters, without control characters.")
        }
        var pushURL: String?
        if let raw = fields["push_url"], !raw.isNull {
            guard let text = raw.stringValue else { throw .unprocessable("push_url must be an http(s) URL.") }
            if let problem = WebhookAddresses.problem(with: text, allowPrivate: allowPrivateWebhooks) {
                throw .unprocessable("push_url \(problem).")
            }
            pushURL = text
        }
        return DeviceRegistration(name: name, platform: platform, pushURL: pushURL)
    }
}
