import Foundation

extension Manifest {
    /// Decodes a manifest, checking its schema before anything else; what is wrong is said
    /// in plain words with its key path (``VersionedDocument``).
    /// - Parameter path: the manifest's path, for messages.
    /// - Throws: `BundleError.unsupportedSchema` or `.notABundle` naming `path`.
    public static func decoded(from data: Data, path: String) throws -> Manifest {
        do {
            return try VersionedDocument.decode(
                Manifest.self, from: [UInt8](data), schema: currentSchema, what: "the manifest")
        } catch VersionedDocument.Failure.invalid(let reason) {
            throw BundleError.notABundle(path: path, reason: reason)
        } catch VersionedDocument.Failure.unsupportedSchema(let found) {
            throw BundleError.unsupportedSchema(path: path, found: found, supported: currentSchema)
        }
    }
}
