/// Decides when deliveries become batches, without doing any I/O: what arrives while a
/// slot is free starts at once (alone, when the load is light); what arrives while every
/// slot is busy waits and leaves together, up to `maxBatch`, when a slot frees. Batches
/// grow exactly as much as the load needs, with no fixed wait — group commit.
public struct BatchDispatch<Item> {
    public let maxBatch: Int
    public let slots: Int
    public private(set) var waiting: [Item] = []
    public private(set) var running = 0
    public private(set) var ended = false

    public init(maxBatch: Int, slots: Int) {
        precondition(maxBatch >= 1 && slots >= 1)
        self.maxBatch = maxBatch
        self.slots = slots
    }

    /// An item arrived; returns the batches to start now.
    public mutating func arrived(_ item: Item) -> [[Item]] {
        waiting.append(item)
        return dispatch()
    }

    /// A batch finished; returns the batches to start now.
    public mutating func finished() -> [[Item]] {
        precondition(running > 0, "finished() without a running batch")
        running -= 1
        return dispatch()
    }

    /// Nothing more will arrive.
    public mutating func end() { ended = true }

    /// Nothing is running or waiting, and nothing more will arrive.
    public var isDone: Bool { ended && running == 0 && waiting.isEmpty }

    private mutating func dispatch() -> [[Item]] {
        var batches: [[Item]] = []
        while running < slots, !waiting.isEmpty {
            let count = min(maxBatch, waiting.count)
            batches.append(Array(waiting.prefix(count)))
            waiting.removeFirst(count)
            running += 1
        }
        return batches
    }
}

extension BatchDispatch: Sendable where Item: Sendable {}
