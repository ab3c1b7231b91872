import AMQPBridge
import Auth
import BlobStorage
import BrokerTopology
import Foundation
import Logging
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// Deletes a user's account data everywhere Syncline holds it, for `DELETE /v1/me`,
/// `syncctl users delete` and purge (which finishes deletions a stopped process left). The
/// user's open streams are closed at once; pushes still queued are dropped by the workers.
public struct AccountEraser: Sendable {
    let accounts: AccountStore
    let publisher: AMQPPublisher
    let office: DeadLetterOffice
    /// Removes the erased files from their store.
    let sweeper: BlobSweeper
    let logger: Logger

    public init(pool: PGPool, publisher: AMQPPublisher, office: DeadLetterOffice, sweeper: BlobSweeper, logger: Logger) {
        self.accounts = AccountStore(pool: pool)
        self.sweeper = sweeper
        self.publisher = publisher
        self.office = office
        self.logger = logger
    }

    /// What the deletion record keeps once the deletion is done: not the user id.
    public static func userHash(_ user: UserID) -> String { Digests.sha256Hex(Array(user.text.utf8)) }

    /// Starts deleting and keeps at it for up to `budget` seconds; true once done.
    public func erase(user: UserID, budget: Double) async throws -> Bool {
        try await accounts.begin(user: user, userHash: Self.userHash(user))
        await publisher.announce(DeviceRevokedEvent(userID: user, deviceID: nil), logger: logger)
        return try await continueErasing(user: user, budget: budget)
    }

    /// Erases batch after batch until nothing is left (true) or the budget is spent.
    public func continueErasing(user: UserID, budget: Double) async throws -> Bool {
        let deadline = Date().addingTimeInterval(budget)
        while try await accounts.eraseBatch(user: user) {
            if Date() > deadline { return false }
        }
        let hash = Self.userHash(user)
        try await accounts.finish(user: user, userHash: hash)
        await office.reconcile()
        try await sweeper.sweep()
        logger.info("account deleted", metadata: ["user.hash": "\(hash.prefix(12))"])
        return true
    }

    /// Finishes deletions whose process stopped midway (requested over a minute ago).
    @discardableResult
    public func resumeUnfinished() async throws -> Int {
        let pending = try await accounts.unfinished(olderThan: 60)
        for user in pending { _ = try await continueErasing(user: user, budget: .infinity) }
        return pending.count
    }

    public func deletion(user: UserID) async throws -> AccountStore.Deletion? {
        try await accounts.deletion(userHash: Self.userHash(user))
    }
}
