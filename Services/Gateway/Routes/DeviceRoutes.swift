import AMQPBridge
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Persistence
import ServiceSupport
import SyncModels

/// `POST/GET /v1/devices`, `DELETE /v1/devices/{device_id}`, and a device's report of the
/// ops it set aside (`POST /v1/devices/{device_id}/set-aside`, for the support console).
struct DeviceRoutes: Sendable {
    let devices: DeviceStore
    let publisher: AMQPPublisher
    let allowPrivateWebhooks: Bool

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/devices", use: create)
        routes.get("/v1/devices", use: list)
        routes.delete("/v1/devices/:device_id", use: revoke)
        routes.post("/v1/devices/:device_id/set-aside", use: reportSetAside)
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
        await publisher.announce(DeviceRevokedEvent(userID: context.user, deviceID: id), logger: context.logger)
        return Response(status: .noContent)
    }
}

extension DeviceRoutes {
    /// At most this many ops a report.
    static let maxSetAsideOps = 500

    @Sendable func reportSetAside(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = DeviceID(try context.parameters.require("device_id")) else { throw APIError.notFound("No such device.") }
        let body = try await request.body.collect(upTo: 256 * 1024)
        let reports = try Self.parseSetAside(Data(buffer: body))
        guard try await devices.recordSetAside(user: context.user, device: id, reports) else {
            throw APIError.notFound("No such device.")
        }
        return Response(status: .noContent)
    }

    /// `{ops: [{op_id, reason, space_id?, collection?, id?, job_id?}]}`: each field checked
    /// as a push checks it; a refusal names the pointer.
    static func parseSetAside(_ body: Data) throws(APIError) -> [DeviceStore.SetAsideReport] {
        guard let root = try? JSONParser.parse(body) else { throw .badRequest("The request body is not valid JSON.") }
        guard let ops = root.objectValue?["ops"]?.arrayValue else { throw .unprocessable("ops must be an array.") }
        guard ops.count <= maxSetAsideOps else { throw .unprocessable("At most \(maxSetAsideOps) ops a report.") }
        var reports: [DeviceStore.SetAsideReport] = []
        for (index, op) in ops.enumerated() {
            func refuse(_ field: String, _ message: String) -> APIError {
                var problem = APIError.unprocessable("ops[\(index)].\(field) \(message).")
                problem.pointer = "/ops/\(index)/\(field)"
                return problem
            }
            guard let fields = op.objectValue else { throw refuse("", "must be an object") }
            func optional(_ field: String, valid: (String) -> Bool, _ message: String) throws(APIError) -> String? {
                guard let value = fields[field], !value.isNull else { return nil }
                guard let text = value.stringValue, valid(text) else { throw refuse(field, message) }
                return text
            }
            guard let opID = fields["op_id"]?.stringValue.flatMap(Names.canonicalUUID) else { throw refuse("op_id", "must be a UUID") }
            guard let reason = fields["reason"]?.stringValue, (1...100).contains(reason.unicodeScalars.count), Names.isPlainText(reason) else {
                throw refuse("reason", "must be 1 to 100 characters of text")
            }
            reports.append(DeviceStore.SetAsideReport(
                opID: opID, space: try optional("space_id", valid: { SpaceID($0) != nil }, "must be a space's id").flatMap(SpaceID.init),
                collection: try optional("collection", valid: Names.isValidCollection, "must be a collection name"),
                recordID: try optional("id", valid: Names.isValidRecordID, "must be a record id"),
                job: try optional("job_id", valid: { JobID($0) != nil }, "must be a job's id").flatMap(JobID.init), reason: reason))
        }
        return reports
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
