import Foundation
import PDTestSupport
import Testing

@testable import PersistentDefaults

/// A class whose instances can change: `@unchecked Sendable` because each test uses its
/// instances on one thread only.
private final class Cell: Codable, Equatable, @unchecked Sendable {
    var x: Int
    init(x: Int) { self.x = x }
    static func == (lhs: Cell, rhs: Cell) -> Bool { lhs.x == rhs.x }
}

/// A struct that holds a class instance.
private struct Holder: Codable, Equatable, Sendable {
    var cell: Cell
}

/// A recursive value type: a node with an array of nodes.
private struct Node: Codable, Sendable {
    var name: String
    var children: [Node]
}

/// An enum whose payload holds a class instance.
private enum Shape: Codable, Sendable {
    case point
    case cell(Cell)
}

/// A key remembers the value of the bytes this process last stored or read (`Key.lastKnown`)
/// and hands it to every later reader. A value that holds class instances inside — a struct with
/// a class field, an array of them — shared those instances: one reader's change to an instance
/// changed what every later read returned, although the stored bytes were the same, and a `set`
/// of a value whose instance the caller had changed compared equal with the remembered value
/// (the same instance) and wrote nothing. Before the fix both tests failed 3 of 3 runs: every
/// read after a reader's change returned the changed value, and 100 of 100 changed values set
/// were lost.
@Suite struct KnownValueSharingTests {
    /// A change one reader makes to an instance inside its value is not seen by later reads.
    @Test func aReaderChangingAnInstanceInsideItsValueDoesNotChangeLaterReads() throws {
        try withTemporaryStore { store, _, log throws in
            let cells = PersistentDefaults.Key<[Cell]>("cells", default: [])
            let holder = PersistentDefaults.Key<Holder>("holder", default: Holder(cell: Cell(x: 0)))
            try store.set([Cell(x: 1)], for: cells)
            try store.set(Holder(cell: Cell(x: 1)), for: holder)
            var changed = 0
            for round in 0..<10 {
                // Read twice: the first read of a value another reader read decodes nothing.
                for _ in 0..<2 {
                    let read = try store.value(for: cells)
                    let readHolder = try store.value(for: holder)
                    if read.map(\.x) != [1] || readHolder.cell.x != 1 { changed += 1 }
                    read.first?.x = 100 + round
                    readHolder.cell.x = 100 + round
                }
                let inSnapshot = try store.read { ($0[cells].map(\.x), $0[holder].cell.x) }
                if inSnapshot != ([1], 1) { changed += 1 }
            }
            #expect(changed == 0, "\(changed) of 30 reads returned an instance another reader had changed")
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// A `set` of a value whose instance the caller changed after setting it stores the change.
    @Test func aSetAfterChangingAnInstanceInsideTheValueStoresTheChange() throws {
        try withTemporaryStore { store, _, log throws in
            let holder = PersistentDefaults.Key<Holder>("holder", default: Holder(cell: Cell(x: 0)))
            let value = Holder(cell: Cell(x: 0))
            try store.set(value, for: holder)
            var lost = 0
            for round in 1...100 {
                value.cell.x = round
                try store.set(value, for: holder)
                if try store.storedValue(named: holder.name) != .json(#"{"cell":{"x":\#(round)}}"#) { lost += 1 }
            }
            #expect(lost == 0, "\(lost) of 100 changed values were not stored")
            // Another key object of the same name decodes what the store holds.
            let other = PersistentDefaults.Key<Holder>("holder", default: Holder(cell: Cell(x: 0)))
            #expect(try store.value(for: other).cell.x == 100)
            #expect(log.all.isEmpty, "\(log.all)")
        }
    }

    /// Which types are remembered: those whose values cannot hold a class instance, decided from
    /// the type; what the walk cannot see into counts as holding instances.
    @Test func onlyTypesWhoseValuesHoldNoInstancesAreRemembered() {
        struct Settings {
            var x: Double
            var title: String
            var tags: Set<String>
            var limits: [String: [Int?]]
            var when: Date
            var id: UUID
            var amount: Decimal
            var home: URL
            var blob: Data
            var pair: (Int, String)
        }
        #expect(holdsOnlyValues(Settings.self))
        #expect(holdsOnlyValues(Node.self))
        #expect(holdsOnlyValues([String: Settings?].self))
        #expect(!holdsOnlyValues(Cell.self))
        #expect(!holdsOnlyValues(Cell?.self))
        #expect(!holdsOnlyValues([Cell].self))
        #expect(!holdsOnlyValues([String: Holder].self))
        #expect(!holdsOnlyValues(Shape.self))
        #expect(!holdsOnlyValues((Int, Cell).self))
        #expect(!holdsOnlyValues((any Sendable).self))
        #expect(!holdsOnlyValues([any Codable].self))
    }
}
