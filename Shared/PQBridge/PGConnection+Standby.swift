import Foundation

extension PGConnection {
    /// Waits until a standby has flushed the transaction this connection just committed,
    /// or throws `.unconfirmed` after `wait`.
    ///
    /// Synchronous replication alone does not promise this: a failover manager turns it
    /// off while a primary is without its standby (pg_auto_failover's `wait_primary`), and
    /// a former primary that was not fenced in time goes on committing alone. What it
    /// commits then is lost when it rejoins. So a write is acknowledged only once another
    /// node holds it: this server's WAL flushed so far — the commit included — must be
    /// flushed by a standby streaming from it (`pg_stat_replication`). Under synchronous
    /// replication that is at once true; without a standby it never is.
    func awaitStandby(within wait: Duration) throws {
        let deadline = ContinuousClock.now + wait
        let first = try execute("""
            SELECT pg_current_wal_flush_lsn()::text,
                   coalesce((SELECT max(flush_lsn) FROM pg_stat_replication) >= pg_current_wal_flush_lsn(), false),
                   pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
            """)
        guard let row = first.first else { throw PGError(code: .decoding, message: "no row") }
        let (target, confirmed, seesStandbys) = try row.decode((String, Bool, Bool).self)
        if confirmed { return }
        guard seesStandbys else {
            // Without the role, pg_stat_replication hides its positions: nothing would ever
            // be confirmed.
            throw PGError(code: .unconfirmed, message:
                "the database role cannot see standbys' positions: grant it pg_read_all_stats (GRANT pg_read_all_stats TO <role>)")
        }
        while ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.002)
            let rows = try execute("""
                SELECT coalesce(max(flush_lsn) >= \(target)::pg_lsn, false) FROM pg_stat_replication
                """)
            if try rows.first?.decode(Bool.self, at: 0) == true { return }
        }
        throw PGError(code: .unconfirmed, message: "no standby flushed the commit at \(target) within \(wait)")
    }
}
