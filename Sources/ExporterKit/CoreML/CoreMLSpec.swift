/// The Core ML message types an `.mlpackage` needs, declared once, with the field numbers of
/// the published schemas (`Model.proto`, `FeatureTypes.proto`, `MIL.proto`). Only the fields
/// this exporter writes are declared; every message encodes its fields in field-number order.
public enum CoreMLSpec {
    /// `Model.specificationVersion` of an iOS 18 / macOS 15 ML program with states.
    public static let specificationVersion = 9
    /// The MIL opset of iOS 18 (`Function.opset`).
    public static let opset = "CoreML8"
    /// The deployment target the program needs.
    public static let deploymentTarget = "iOS18"

    /// `MIL.DataType`.
    public enum DataType: Int, Sendable {
        /// Scalar types, by their numbers in `MIL.proto`.
        case bool = 1, string = 2
        case float16 = 10, float32 = 11
        case int8 = 21, int16 = 22, int32 = 23
        /// Unsigned narrow types, in which palette indices are stored (``paletteIndices(bits:)``).
        case uint8 = 31, uint4 = 35, uint2 = 36, uint1 = 37, uint6 = 38, uint3 = 39

        /// The unsigned index type of `bits`-wide palette indices.
        public static func paletteIndices(bits: Int) -> DataType? {
            switch bits {
            case 2: return .uint2
            case 3: return .uint3
            case 4: return .uint4
            case 6: return .uint6
            case 8: return .uint8
            default: return nil
            }
        }

        /// MIL's spelling, for op counts and messages (`fp16`, `uint4`, …).
        public var milName: String {
            switch self {
            case .bool: return "bool"
            case .string: return "string"
            case .float16: return "fp16"
            case .float32: return "fp32"
            case .int8: return "int8"
            case .int16: return "int16"
            case .int32: return "int32"
            case .uint8: return "uint8"
            case .uint4: return "uint4"
            case .uint2: return "uint2"
            case .uint1: return "uint1"
            case .uint6: return "uint6"
            case .uint3: return "uint3"
            }
        }
    }

    /// `MIL.Dimension`: a fixed size, or unknown (flexible at run time).
    public enum Dimension: Equatable, Sendable, ProtobufMessage {
        /// A size fixed at conversion (`ConstantDimension`).
        case fixed(Int)
        /// A size known only at run time (`UnknownDimension`, not variadic).
        case unknown

        /// Writes `constant` (field 1) or `unknown` (field 2).
        public func encode(into writer: inout ProtobufWriter) {
            switch self {
            case .fixed(let size): writer.message(1) { $0.uint(1, UInt64(size)) }  // ConstantDimension.size
            case .unknown: writer.message(2) { _ in }  // UnknownDimension, variadic false
            }
        }
    }

    /// `MIL.TensorType`.
    public struct TensorType: Equatable, Sendable, ProtobufMessage {
        /// Element type.
        public var dataType: DataType
        /// Dimensions; empty for a scalar.
        public var shape: [Dimension]

        /// A tensor type.
        public init(_ dataType: DataType, _ shape: [Dimension]) {
            self.dataType = dataType
            self.shape = shape
        }

        /// A tensor type of fixed shape.
        public init(_ dataType: DataType, fixed shape: [Int]) {
            self.init(dataType, shape.map { .fixed($0) })
        }

        /// Writes the data type, the rank and each dimension.
        public func encode(into writer: inout ProtobufWriter) {
            writer.int(1, Int64(dataType.rawValue))
            writer.int(2, Int64(shape.count))
            for dimension in shape { writer.message(3, dimension) }
        }
    }

    /// `MIL.ValueType`: a tensor, or a state wrapping one.
    public enum ValueType: Equatable, Sendable, ProtobufMessage {
        /// A tensor variable (`tensorType`).
        case tensor(TensorType)
        /// A state holding a tensor between predictions, the KV cache (`stateType`).
        case state(TensorType)

        /// Writes `tensorType` (field 1) or `stateType` wrapping the tensor (field 5).
        public func encode(into writer: inout ProtobufWriter) {
            switch self {
            case .tensor(let tensor): writer.message(1, tensor)
            // StateType.wrappedType
            case .state(let tensor): writer.message(5) { $0.message(1) { $0.message(1, tensor) } }
            }
        }
    }

    /// `MIL.NamedValueType`.
    public struct NamedValueType: Equatable, Sendable, ProtobufMessage {
        /// The variable's name.
        public var name: String
        /// Its type.
        public var type: ValueType

        /// A named type.
        public init(name: String, type: ValueType) {
            self.name = name
            self.type = type
        }

        /// Writes the name, then the type.
        public func encode(into writer: inout ProtobufWriter) {
            writer.string(1, name)
            writer.message(2, type)
        }
    }

    /// `MIL.TensorValue`: immediate contents.
    public enum TensorValue: Equatable, Sendable, ProtobufMessage {
        /// Packed float32 values.
        case floats([Float])
        /// Packed int32 values (written as varints).
        case ints([Int32])
        /// Packed booleans.
        case bools([Bool])
        /// Strings, one field each.
        case strings([String])
        /// Raw little-endian element bytes (float16 values).
        case bytes([UInt8])

        /// Writes the one field of the contents' kind.
        public func encode(into writer: inout ProtobufWriter) {
            switch self {
            case .floats(let values): writer.message(1) { $0.packedFloats(1, values) }
            case .ints(let values): writer.message(2) { $0.packedInts(1, values.map(Int64.init)) }
            case .bools(let values): writer.message(3) { $0.packedBools(1, values) }
            case .strings(let values): writer.message(4) { writer in for value in values { writer.string(1, value) } }
            case .bytes(let values): writer.message(7) { $0.bytes(1, values) }
            }
        }
    }

    /// `MIL.Value`: a typed immediate value or a reference into the weights file.
    public struct Value: Equatable, Sendable, ProtobufMessage {
        /// Where the contents are.
        public enum Contents: Equatable, Sendable {
            /// In the program.
            case immediate(TensorValue)
            /// In a blob storage file, at the offset of the blob's metadata record.
            case blob(file: String, offset: Int)
        }

        /// The value's type.
        public var type: ValueType
        /// Its contents.
        public var contents: Contents

        /// A value.
        public init(type: ValueType, contents: Contents) {
            self.type = type
            self.contents = contents
        }

        /// Writes the type, then `immediateValue` or `blobFileValue` (file name and offset).
        public func encode(into writer: inout ProtobufWriter) {
            writer.message(2, type)
            switch contents {
            case .immediate(let tensor): writer.message(3) { $0.message(1, tensor) }  // ImmediateValue.tensor
            case .blob(let file, let offset):
                writer.message(5) {
                    $0.string(1, file)
                    $0.uint(2, UInt64(offset))
                }
            }
        }
    }

    /// `MIL.Argument.Binding`: a variable by name, or an inline value.
    public enum Binding: Equatable, Sendable, ProtobufMessage {
        /// A variable defined earlier in the block (or a function input).
        case name(String)
        /// A constant given in place.
        case value(Value)

        /// Writes `name` (field 1) or `value` (field 2).
        public func encode(into writer: inout ProtobufWriter) {
            switch self {
            case .name(let name): writer.string(1, name)
            case .value(let value): writer.message(2, value)
            }
        }
    }

    /// `MIL.Operation`.
    public struct Operation: Sendable, ProtobufMessage {
        /// The op type (`linear`, `constexpr_lut_to_dense`, …).
        public var type: String
        /// Inputs by parameter name, sorted by name when encoded; each one or more bindings.
        public var inputs: [(key: String, value: [Binding])]
        /// Outputs.
        public var outputs: [NamedValueType]
        /// Attributes by name (`name`, and `val` for `const`), sorted when encoded.
        public var attributes: [(key: String, value: Value)]

        /// An operation.
        public init(
            type: String, inputs: [(key: String, value: [Binding])], outputs: [NamedValueType],
            attributes: [(key: String, value: Value)]
        ) {
            self.type = type
            self.inputs = inputs
            self.outputs = outputs
            self.attributes = attributes
        }

        /// Writes the type, inputs and attributes sorted by name (so the bytes do not depend on
        /// the order they were built in), and the outputs in order.
        public func encode(into writer: inout ProtobufWriter) {
            writer.string(1, type)
            writer.map(2, inputs.sorted { $0.key < $1.key }) { writer, bindings in
                writer.message(2) { argument in for binding in bindings { argument.message(1, binding) } }
            }
            for output in outputs { writer.message(3, output) }
            writer.map(5, attributes.sorted { $0.key < $1.key }) { $0.message(2, $1) }
        }
    }

    /// `MIL.Program` with one function `main` of one block in ``CoreMLSpec/opset``.
    public struct Program: Sendable, ProtobufMessage {
        /// Function inputs (tensors and states).
        public var inputs: [NamedValueType]
        /// The block's operations, in execution order.
        public var operations: [Operation]
        /// The block's outputs, by variable name.
        public var outputs: [String]

        /// A program.
        public init(inputs: [NamedValueType], operations: [Operation], outputs: [String]) {
            self.inputs = inputs
            self.operations = operations
            self.outputs = outputs
        }

        /// Writes version 1 and the function `main`, its inputs, opset and single block.
        public func encode(into writer: inout ProtobufWriter) {
            writer.int(1, 1)  // version
            writer.message(2) { entry in  // functions["main"]
                entry.string(1, "main")
                entry.message(2) { function in
                    for input in inputs { function.message(1, input) }
                    function.string(2, CoreMLSpec.opset)
                    function.message(3) { specialization in  // block_specializations[opset]
                        specialization.string(1, CoreMLSpec.opset)
                        specialization.message(2) { block in
                            for output in outputs { block.string(2, output) }
                            for operation in operations { block.message(3, operation) }
                        }
                    }
                }
            }
        }
    }

    /// `ArrayFeatureType.ArrayDataType`.
    public enum ArrayDataType: Int, Sendable {
        /// Half precision: the logits and the KV cache at float16.
        case float16 = 65552
        /// Single precision.
        case float32 = 65568
        /// 32-bit integers: token ids and positions.
        case int32 = 131104
    }

    /// A multi-array feature (`ArrayFeatureType`): default shape and, when flexible, the
    /// range of every dimension.
    public struct ArrayFeature: Sendable, ProtobufMessage {
        /// The default shape (empty for an output of flexible shape).
        public var shape: [Int]
        /// Element type.
        public var dataType: ArrayDataType
        /// `(lower, upper)` per dimension when flexible, else nil.
        public var ranges: [(lower: Int, upper: Int)]?

        /// A multi-array feature.
        public init(shape: [Int], dataType: ArrayDataType, ranges: [(lower: Int, upper: Int)]? = nil) {
            self.shape = shape
            self.dataType = dataType
            self.ranges = ranges
        }

        /// Writes the shape (when not empty), the data type and, when flexible, `shapeRange`.
        public func encode(into writer: inout ProtobufWriter) {
            if !shape.isEmpty { writer.packedInts(1, shape.map(Int64.init)) }
            writer.int(2, Int64(dataType.rawValue))
            if let ranges {
                writer.message(31) { shapeRange in
                    for range in ranges {
                        shapeRange.message(1) {
                            $0.uint(1, UInt64(range.lower))
                            $0.int(2, Int64(range.upper))
                        }
                    }
                }
            }
        }
    }

    /// `FeatureDescription` of a multi-array input or output, or of a state.
    public struct Feature: Sendable, ProtobufMessage {
        /// The feature's name.
        public var name: String
        /// One-line description.
        public var summary: String
        /// The array.
        public var array: ArrayFeature
        /// Whether the feature is a model state (`StateFeatureType`).
        public var isState: Bool

        /// A feature.
        public init(name: String, summary: String, array: ArrayFeature, isState: Bool = false) {
            self.name = name
            self.summary = summary
            self.array = array
            self.isState = isState
        }

        /// Writes the name, the summary when not empty, and a `multiArrayType` or `stateType`.
        public func encode(into writer: inout ProtobufWriter) {
            writer.string(1, name)
            if !summary.isEmpty { writer.string(2, summary) }
            writer.message(3) { type in
                if isState {
                    type.message(8) { $0.message(1, array) }
                } else {
                    type.message(5, array)
                }
            }
        }
    }

    /// `Model` holding an ML program.
    public struct Model: Sendable, ProtobufMessage {
        /// Inputs.
        public var inputs: [Feature]
        /// Outputs.
        public var outputs: [Feature]
        /// States.
        public var states: [Feature]
        /// `Metadata.shortDescription`.
        public var summary: String
        /// `Metadata.author`.
        public var author: String
        /// `Metadata.userDefined`, sorted by key when encoded.
        public var userDefined: [String: String]
        /// The program.
        public var program: Program

        /// A model.
        public init(
            inputs: [Feature], outputs: [Feature], states: [Feature], summary: String, author: String,
            userDefined: [String: String], program: Program
        ) {
            self.inputs = inputs
            self.outputs = outputs
            self.states = states
            self.summary = summary
            self.author = author
            self.userDefined = userDefined
            self.program = program
        }

        /// Writes the specification version, the description (features and metadata, user-defined
        /// keys sorted) and the program (`mlProgram`, field 502).
        public func encode(into writer: inout ProtobufWriter) {
            writer.int(1, Int64(CoreMLSpec.specificationVersion))
            writer.message(2) { description in
                for input in inputs { description.message(1, input) }
                for output in outputs { description.message(10, output) }
                for state in states { description.message(13, state) }
                description.message(100) { metadata in
                    metadata.string(1, summary)
                    metadata.string(3, author)
                    metadata.map(100, userDefined.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value) }) {
                        $0.string(2, $1)
                    }
                }
            }
            writer.message(502, program)
        }
    }
}
