import URLSessionCancellation

/// A device's registration with the server, shared by the clients of its spaces
/// (`client(for:databasePath:)`), so a phone is one device in every space — even when a
/// space's client is made before the device has ever reached the server. The first client
/// to need the id registers; the others wait for that one registration. A waiter that is
/// cancelled (its client stopped) stops waiting at once; the registration goes on for the
/// others, and keeps the id it gets.
actor DeviceRegistration {
    private var deviceID: String?
    private var registering: Task<String, any Error>?

    init(deviceID: String?) {
        self.deviceID = deviceID
    }

    /// The device id, registering with `register` when nobody has yet.
    func id(register: @escaping @Sendable () async throws -> String) async throws -> String {
        if let deviceID { return deviceID }
        let task = registering ?? start(register)
        return try await AbandonOnCancel.run { try await task.value }
    }

    private func start(_ register: @escaping @Sendable () async throws -> String) -> Task<String, any Error> {
        let task = Task {
            defer { registering = nil }
            let id = try await register()
            deviceID = id
            return id
        }
        registering = task
        return task
    }

    /// The server no longer knows `id` (its database was restored from a backup made
    /// before the device registered): the next client to need an id registers again.
    func forget(_ id: String) {
        if deviceID == id { deviceID = nil }
    }

    /// A client whose own store already holds the id (a registration from before it was
    /// shared) makes it the device's.
    func adopt(_ id: String) {
        if deviceID == nil { deviceID = id }
    }
}
