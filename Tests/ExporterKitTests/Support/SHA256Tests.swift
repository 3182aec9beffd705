import Testing

@testable import ExporterKit

@Suite("SHA-256")
struct SHA256Tests {
    private func digest(_ text: String) -> String {
        var hash = SHA256()
        hash.update(Array(text.utf8))
        return hash.hexDigest()
    }

    @Test("FIPS 180-4 test vectors")
    func vectors() {
        #expect(digest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            digest(String(repeating: "a", count: 1000))
                == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
    }

    @Test("is the same fed in pieces")
    func pieces() {
        var hash = SHA256()
        hash.update(Array("ab".utf8))
        hash.update(Array("c".utf8))
        #expect(hash.hexDigest() == digest("abc"))
    }
}
