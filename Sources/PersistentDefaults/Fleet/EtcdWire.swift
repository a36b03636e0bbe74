import Foundation

// The JSON of etcd 3.4's v3 gateway (grpc-gateway over api/etcdserverpb/rpc.proto): field names
// in snake_case, `bytes` fields base64 (`Data` in Swift), `int64` fields as decimal strings, and
// fields at their zero value left out of responses (a `false` `succeeded`, an empty `kvs`, the
// event type `PUT`).

/// `ResponseHeader`.
struct EtcdHeader: Decodable, Sendable {
    var clusterID: String
    var memberID: String
    var revision: Int64

    enum CodingKeys: String, CodingKey {
        case clusterID = "cluster_id"
        case memberID = "member_id"
        case revision
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        clusterID = try container.decodeIfPresent(String.self, forKey: .clusterID) ?? ""
        memberID = try container.decodeIfPresent(String.self, forKey: .memberID) ?? ""
        revision = try container.decodeInt64(forKey: .revision)
    }
}

/// `mvccpb.KeyValue`.
struct EtcdKeyValue: Decodable, Sendable, Equatable {
    var key: Data
    var value: Data
    var createRevision: Int64
    var modRevision: Int64
    var version: Int64

    enum CodingKeys: String, CodingKey {
        case key, value, version
        case createRevision = "create_revision"
        case modRevision = "mod_revision"
    }

    init(key: Data, value: Data, createRevision: Int64 = 0, modRevision: Int64 = 0, version: Int64 = 0) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.version = version
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        key = try container.decodeIfPresent(Data.self, forKey: .key) ?? Data()
        value = try container.decodeIfPresent(Data.self, forKey: .value) ?? Data()
        createRevision = try container.decodeInt64(forKey: .createRevision)
        modRevision = try container.decodeInt64(forKey: .modRevision)
        version = try container.decodeInt64(forKey: .version)
    }
}

/// `RangeRequest`: the keys from `key` up to `rangeEnd` at `revision` (0: the newest).
struct EtcdRangeRequest: Encodable, Sendable {
    var key: Data
    var rangeEnd: Data?
    var revision: Int64 = 0
    var limit: Int64 = 0
    var countOnly = false

    enum CodingKeys: String, CodingKey {
        case key, revision, limit
        case rangeEnd = "range_end"
        case countOnly = "count_only"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(key, forKey: .key)
        try container.encodeIfPresent(rangeEnd, forKey: .rangeEnd)
        if revision != 0 { try container.encode(String(revision), forKey: .revision) }
        if limit != 0 { try container.encode(String(limit), forKey: .limit) }
        if countOnly { try container.encode(true, forKey: .countOnly) }
    }
}

/// `RangeResponse`.
struct EtcdRangeResponse: Decodable, Sendable {
    var header: EtcdHeader
    var kvs: [EtcdKeyValue]
    var more: Bool
    var count: Int64

    enum CodingKeys: String, CodingKey { case header, kvs, more, count }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        header = try container.decode(EtcdHeader.self, forKey: .header)
        kvs = try container.decodeIfPresent([EtcdKeyValue].self, forKey: .kvs) ?? []
        more = try container.decodeIfPresent(Bool.self, forKey: .more) ?? false
        count = try container.decodeInt64(forKey: .count)
    }
}

/// `PutRequest` (never with a lease: settings must not expire with one).
struct EtcdPutRequest: Encodable, Sendable {
    var key: Data
    var value: Data
}

/// A response that only carries the header (`PutResponse`, `DeleteRangeResponse`).
struct EtcdHeaderResponse: Decodable, Sendable {
    var header: EtcdHeader
}

/// `Compare`, restricted to what the mirror compares: a key's `mod_revision` or `version`.
struct EtcdCompare: Encodable, Sendable, Equatable {
    enum Result: String, Encodable, Sendable {
        case equal = "EQUAL"
        case less = "LESS"
        case greater = "GREATER"
    }
    enum Target: Sendable, Equatable {
        case modRevision(Int64)
        case version(Int64)
    }

    var key: Data
    var result: Result
    var target: Target

    enum CodingKeys: String, CodingKey {
        case key, result, target
        case modRevision = "mod_revision"
        case version
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(key, forKey: .key)
        try container.encode(result, forKey: .result)
        switch target {
        case .modRevision(let revision):
            try container.encode("MOD", forKey: .target)
            try container.encode(String(revision), forKey: .modRevision)
        case .version(let version):
            try container.encode("VERSION", forKey: .target)
            try container.encode(String(version), forKey: .version)
        }
    }
}

/// `RequestOp`, restricted to puts and single-key deletes.
enum EtcdOperation: Encodable, Sendable, Equatable {
    case put(key: Data, value: Data)
    case delete(key: Data)

    enum CodingKeys: String, CodingKey {
        case requestPut = "request_put"
        case requestDeleteRange = "request_delete_range"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .put(let key, let value): try container.encode(EtcdPutRequest(key: key, value: value), forKey: .requestPut)
        case .delete(let key): try container.encode(["key": key], forKey: .requestDeleteRange)
        }
    }
}

/// `TxnRequest`.
struct EtcdTxnRequest: Encodable, Sendable {
    var compare: [EtcdCompare]
    var success: [EtcdOperation]
    var failure: [EtcdOperation] = []
}

/// `TxnResponse`: whether the comparisons held, the revision it left, and whether it made one.
struct EtcdTxnResponse: Decodable, Sendable {
    var header: EtcdHeader
    var succeeded: Bool
    /// Whether an operation changed a key (a put, or a delete that found its key): only then did
    /// etcd make a revision, the header's. Otherwise the header holds etcd's newest, which may
    /// belong to any prefix.
    var changedKeys: Bool

    /// `ResponseOp`: a put's or a delete's answer (`deleted`: how many keys it removed).
    private struct Operation: Decodable {
        struct Deletion: Decodable {
            var deleted: Int64

            enum CodingKeys: String, CodingKey { case deleted }

            init(from decoder: any Decoder) throws {
                deleted = try decoder.container(keyedBy: CodingKeys.self).decodeInt64(forKey: .deleted)
            }
        }

        var deletion: Deletion?

        enum CodingKeys: String, CodingKey { case deletion = "response_delete_range" }
    }

    enum CodingKeys: String, CodingKey { case header, succeeded, responses }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        header = try container.decode(EtcdHeader.self, forKey: .header)
        succeeded = try container.decodeIfPresent(Bool.self, forKey: .succeeded) ?? false
        let operations = try container.decodeIfPresent([Operation].self, forKey: .responses) ?? []
        // Every answer but a delete's (a put's) changed its key; without answers, assume one did.
        changedKeys = operations.isEmpty || operations.contains { ($0.deletion?.deleted ?? 1) > 0 }
    }
}

/// The body of `POST /v3/watch`: one `WatchCreateRequest`.
struct EtcdWatchCreate: Encodable, Sendable {
    var key: Data
    var rangeEnd: Data
    var startRevision: Int64

    enum Outer: String, CodingKey { case createRequest = "create_request" }
    enum CodingKeys: String, CodingKey {
        case key
        case rangeEnd = "range_end"
        case startRevision = "start_revision"
        case progressNotify = "progress_notify"
    }

    func encode(to encoder: any Encoder) throws {
        var outer = encoder.container(keyedBy: Outer.self)
        var container = outer.nestedContainer(keyedBy: CodingKeys.self, forKey: .createRequest)
        try container.encode(key, forKey: .key)
        try container.encode(rangeEnd, forKey: .rangeEnd)
        try container.encode(String(startRevision), forKey: .startRevision)
        // The server then sends a response without events, at its
        // --experimental-watch-progress-notify-interval, whenever this watcher has caught up.
        try container.encode(true, forKey: .progressNotify)
    }
}

/// One line of the watch stream: `{"result": WatchResponse}` or `{"error": …}`.
struct EtcdWatchMessage: Decodable, Sendable {
    struct Event: Decodable, Sendable {
        var isDelete: Bool
        var kv: EtcdKeyValue

        enum CodingKeys: String, CodingKey { case type, kv }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            isDelete = try container.decodeIfPresent(String.self, forKey: .type) == "DELETE"
            kv = try container.decode(EtcdKeyValue.self, forKey: .kv)
        }
    }

    struct Result: Decodable, Sendable {
        var header: EtcdHeader
        var created: Bool
        var canceled: Bool
        var compactRevision: Int64
        var cancelReason: String
        var events: [Event]

        enum CodingKeys: String, CodingKey {
            case header, created, canceled, events
            case compactRevision = "compact_revision"
            case cancelReason = "cancel_reason"
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            header = try container.decode(EtcdHeader.self, forKey: .header)
            created = try container.decodeIfPresent(Bool.self, forKey: .created) ?? false
            canceled = try container.decodeIfPresent(Bool.self, forKey: .canceled) ?? false
            compactRevision = try container.decodeInt64(forKey: .compactRevision)
            cancelReason = try container.decodeIfPresent(String.self, forKey: .cancelReason) ?? ""
            events = try container.decodeIfPresent([Event].self, forKey: .events) ?? []
        }
    }

    struct Failure: Decodable, Sendable {
        var message: String?
        var httpCode: Int?

        enum CodingKeys: String, CodingKey {
            case message
            case httpCode = "http_code"
        }
    }

    var result: Result?
    var error: Failure?
}

/// An error body of a unary call: `{"error": "…", "message": "…", "code": N}` (a gRPC code).
struct EtcdErrorBody: Decodable, Sendable {
    var error: String?
    var message: String?
    var code: Int?
}

extension KeyedDecodingContainer {
    /// An `int64` field: a decimal string (how the gateway writes it) or a number; 0 when absent.
    func decodeInt64(forKey key: Key) throws -> Int64 {
        if let text = try? decodeIfPresent(String.self, forKey: key) {
            guard let value = Int64(text) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "not an int64: \(text)")
            }
            return value
        }
        return try decodeIfPresent(Int64.self, forKey: key) ?? 0
    }
}

/// The key one past every key that starts with `prefix` (etcd's `range_end` for a prefix):
/// the prefix with its last byte below 0xFF incremented and what follows dropped; `[0]` (every
/// key) when all its bytes are 0xFF.
func etcdRangeEnd(ofPrefix prefix: [UInt8]) -> [UInt8] {
    var end = prefix
    while let last = end.last {
        if last < 0xFF {
            end[end.count - 1] = last + 1
            return end
        }
        end.removeLast()
    }
    return [0]
}
