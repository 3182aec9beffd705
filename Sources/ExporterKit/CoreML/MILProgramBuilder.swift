/// A variable of a MIL program: its name and tensor type.
public struct MILVariable: Equatable, Sendable {
    /// The name operations refer to it by.
    public let name: String
    /// Its type.
    public let type: CoreMLSpec.TensorType
}

/// Builds one MIL block op by op: every op gets a unique name, its parameters become `const`
/// ops (small values inline, large ones in the blob storage layout), and the op types are
/// counted for the manifest. Output types are given by the caller, who knows the shapes;
/// unknown (flexible) dimensions are written as such.
public final class MILProgramBuilder {
    /// How a program refers to its blob storage file.
    public static let weightFile = "@model_path/weights/weight.bin"

    /// A parameter of an op.
    public enum Parameter {
        /// A variable.
        case variable(MILVariable)
        /// Several variables (`concat`'s `values`).
        case variables([MILVariable])
        /// An int32 tensor of the given shape (`[]` for a scalar; nil for `[count]`).
        case ints([Int32], shape: [Int]? = nil)
        /// A bool tensor (nil shape for `[count]`, `[]` for a scalar).
        case bools([Bool], shape: [Int]? = nil)
        /// A float32 scalar.
        case float32(Float)
        /// A float16 scalar.
        case float16(Float16)
        /// A string scalar.
        case string(String)
    }

    /// Operations so far, in order.
    public private(set) var operations: [CoreMLSpec.Operation] = []
    /// Op type → number of ops of that type (`const` included).
    public private(set) var opCounts: [String: Int] = [:]
    /// The blobs the program refers to.
    public private(set) var blobs = MILBlobStorage.Layout()
    private var usedNames: Set<String> = []

    /// An empty block.
    public init() {}

    /// `base`, or `base_1`, `base_2`… when taken.
    public func uniqueName(_ base: String) -> String {
        var name = base
        var counter = 1
        while usedNames.contains(name) {
            name = "\(base)_\(counter)"
            counter += 1
        }
        usedNames.insert(name)
        return name
    }

    /// Reserves a name used by a function input.
    public func reserve(_ name: String) { usedNames.insert(name) }

    /// Adds a blob and returns a value referring to it.
    public func blobValue(_ blob: MILBlobStorage.Blob, type: CoreMLSpec.TensorType) -> CoreMLSpec.Value {
        let offset = blobs.append(blob)
        return CoreMLSpec.Value(
            type: .tensor(type), contents: .blob(file: MILProgramBuilder.weightFile, offset: offset))
    }

    /// A `const` op holding `value`.
    @discardableResult
    public func constant(_ base: String, _ value: CoreMLSpec.Value, type: CoreMLSpec.TensorType) -> MILVariable {
        let name = uniqueName(base)
        append(
            CoreMLSpec.Operation(
                type: "const", inputs: [], outputs: [CoreMLSpec.NamedValueType(name: name, type: .tensor(type))],
                attributes: [("name", MILProgramBuilder.stringValue(name)), ("val", value)]))
        return MILVariable(name: name, type: type)
    }

    /// A `constexpr_*` op whose inputs are inline values (blobs or immediates).
    public func constexpr(
        _ type: String, _ base: String, inputs: [(String, CoreMLSpec.Value)], output: CoreMLSpec.TensorType
    ) -> MILVariable {
        let name = uniqueName(base)
        append(
            CoreMLSpec.Operation(
                type: type, inputs: inputs.map { (key: $0.0, value: [CoreMLSpec.Binding.value($0.1)]) },
                outputs: [CoreMLSpec.NamedValueType(name: name, type: .tensor(output))],
                attributes: [("name", MILProgramBuilder.stringValue(name))]))
        return MILVariable(name: name, type: output)
    }

    /// An op with one output.
    @discardableResult
    public func op(
        _ type: String, _ base: String, _ parameters: [(String, Parameter)], output: CoreMLSpec.TensorType
    ) -> MILVariable {
        op(type, base, parameters, outputs: [output])[0]
    }

    /// An op with any number of outputs (none for `write_state`); outputs are named `base`,
    /// then `base_out1`, ….
    @discardableResult
    public func op(
        _ type: String, _ base: String, _ parameters: [(String, Parameter)], outputs: [CoreMLSpec.TensorType]
    ) -> [MILVariable] {
        let name = uniqueName(base)
        var inputs: [(key: String, value: [CoreMLSpec.Binding])] = []
        for (key, parameter) in parameters {
            let variables: [MILVariable]
            switch parameter {
            case .variable(let variable): variables = [variable]
            case .variables(let list): variables = list
            default: variables = [literal(parameter, name: "\(name)_\(key)")]
            }
            inputs.append((key: key, value: variables.map { .name($0.name) }))
        }
        let results = outputs.enumerated().map { index, type in
            MILVariable(name: index == 0 ? name : uniqueName("\(name)_out\(index)"), type: type)
        }
        append(
            CoreMLSpec.Operation(
                type: type, inputs: inputs,
                outputs: results.map { CoreMLSpec.NamedValueType(name: $0.name, type: .tensor($0.type)) },
                attributes: [("name", MILProgramBuilder.stringValue(name))]))
        return results
    }

    private func literal(_ parameter: Parameter, name: String) -> MILVariable {
        let type: CoreMLSpec.TensorType
        let tensor: CoreMLSpec.TensorValue
        switch parameter {
        case .ints(let values, let shape):
            type = CoreMLSpec.TensorType(.int32, fixed: shape ?? [values.count])
            tensor = .ints(values)
        case .bools(let values, let shape):
            type = CoreMLSpec.TensorType(.bool, fixed: shape ?? [values.count])
            tensor = .bools(values)
        case .float32(let value):
            type = CoreMLSpec.TensorType(.float32, fixed: [])
            tensor = .floats([value])
        case .float16(let value):
            type = CoreMLSpec.TensorType(.float16, fixed: [])
            let bits = value.bitPattern
            tensor = .bytes([UInt8(truncatingIfNeeded: bits), UInt8(truncatingIfNeeded: bits >> 8)])
        case .string(let value):
            type = CoreMLSpec.TensorType(.string, fixed: [])
            tensor = .strings([value])
        case .variable(let variable):
            return variable
        case .variables(let list):
            return list[0]
        }
        return constant(name, CoreMLSpec.Value(type: .tensor(type), contents: .immediate(tensor)), type: type)
    }

    private func append(_ operation: CoreMLSpec.Operation) {
        operations.append(operation)
        opCounts[operation.type, default: 0] += 1
    }

    /// A string scalar value (op names).
    static func stringValue(_ text: String) -> CoreMLSpec.Value {
        CoreMLSpec.Value(
            type: .tensor(CoreMLSpec.TensorType(.string, fixed: [])), contents: .immediate(.strings([text])))
    }
}
