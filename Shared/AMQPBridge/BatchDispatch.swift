/// Decides when deliveries become batches, without doing any I/O: what arrives while a
/// slot is free starts at once (alone, when the load is light); what arrives while every
/// slot is busy waits and leaves together, up to `maxBatch` items and `maxWeight` in
/// weight (a job's ops), when a slot frees. An item heavier than `maxWeight` goes alone.
/// Batches grow exactly as much as the load needs, with no fixed wait — group commit.
public struct BatchDispatch<Item> {
    public let maxBatch: Int
    public let maxWeight: Int
    public let slots: Int
    private var waiting: [(item: Item, weight: Int)] = []
    public private(set) var running = 0
    public private(set) var ended = false

    public init(maxBatch: Int, maxWeight: Int = .max, slots: Int) {
        precondition(maxBatch >= 1 && maxWeight >= 1 && slots >= 1)
        self.maxBatch = maxBatch
        self.maxWeight = maxWeight
        self.slots = slots
    }

    /// The items waiting for a slot, in arrival order.
    public var waitingItems: [Item] { waiting.map(\.item) }

    /// An item arrived; returns the batches to start now.
    public mutating func arrived(_ item: Item, weight: Int = 1) -> [[Item]] {
        waiting.append((item, max(weight, 1)))
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
            var count = 0
            var weight = 0
            while count < min(maxBatch, waiting.count),
                  count == 0 || weight + waiting[count].weight <= maxWeight {
                weight += waiting[count].weight
                count += 1
            }
            batches.append(waiting.prefix(count).map(\.item))
            waiting.removeFirst(count)
            running += 1
        }
        return batches
    }
}

extension BatchDispatch: Sendable where Item: Sendable {}
