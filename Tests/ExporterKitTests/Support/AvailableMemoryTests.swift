import Foundation
import Testing

@testable import ExporterKit

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("available memory: the machine's, or what a limit of the process leaves")
struct AvailableMemoryTests {
    private let mebibyte = 1 << 20
    private let thread = (8 << 20) + 4096

    @Test("reads VmSize and VmData from /proc/self/status, whose fields are tab-separated")
    func statusFields() {
        let text = "Name:\texporter\nVmPeak:\t  140000 kB\nVmSize:\t   82056 kB\nVmData:\t   13024 kB\nThreads:\t2\n"
        #expect(SystemResources.kibibyteField("VmSize:", in: text) == 82_056 * 1024)
        #expect(SystemResources.kibibyteField("VmData:", in: text) == 13_024 * 1024)
        #expect(SystemResources.kibibyteField("VmSwap:", in: text) == nil)
        #expect(SystemResources.kibibyteField("VmSize:", in: "VmSize:\tlots kB\n") == nil)
    }

    @Test("a finite limit leaves the limit less what the process uses, its threads' stacks and the margin")
    func limitHeadroom() {
        let limit = MemoryLimitUse(limit: .addressSpace, bytes: 300 * mebibyte, usedBytes: 80 * mebibyte)
        let available = SystemResources.availableMemory(
            system: 20_000 * mebibyte, limits: [limit], threads: 7, threadReserveBytes: thread,
            marginBytes: 16 * mebibyte)
        #expect(
            available
                == AvailableMemory(
                    bytes: 300 * mebibyte - 80 * mebibyte - 7 * thread - 16 * mebibyte,
                    limit: .addressSpace))
    }

    @Test("the smaller figure wins: the machine's, or the tighter of two limits; nothing left is 0, never negative")
    func smallerWins() {
        let space = MemoryLimitUse(limit: .addressSpace, bytes: 400 * mebibyte, usedBytes: 80 * mebibyte)
        let data = MemoryLimitUse(limit: .data, bytes: 100 * mebibyte, usedBytes: 10 * mebibyte)
        func available(_ system: Int?, _ limits: [MemoryLimitUse]) -> AvailableMemory? {
            SystemResources.availableMemory(
                system: system, limits: limits, threads: 2, threadReserveBytes: thread, marginBytes: mebibyte)
        }
        #expect(available(50 * mebibyte, [space, data]) == AvailableMemory(bytes: 50 * mebibyte))
        #expect(
            available(500 * mebibyte, [space, data])
                == AvailableMemory(bytes: 90 * mebibyte - 2 * thread - mebibyte, limit: .data))
        #expect(
            available(nil, [space])
                == AvailableMemory(bytes: 320 * mebibyte - 2 * thread - mebibyte, limit: .addressSpace))
        let full = MemoryLimitUse(limit: .addressSpace, bytes: 90 * mebibyte, usedBytes: 85 * mebibyte)
        #expect(available(500 * mebibyte, [full]) == AvailableMemory(bytes: 0, limit: .addressSpace))
        let over = MemoryLimitUse(limit: .data, bytes: 90 * mebibyte, usedBytes: 95 * mebibyte)
        #expect(available(500 * mebibyte, [over]) == AvailableMemory(bytes: 0, limit: .data))
        #expect(available(nil, []) == nil)
        // A tie is the machine's memory: no limit is to blame.
        let tie = MemoryLimitUse(limit: .data, bytes: 10 * mebibyte + 2 * thread + mebibyte, usedBytes: 0)
        #expect(available(10 * mebibyte, [tie]) == AvailableMemory(bytes: 10 * mebibyte))
    }

    @Test("an export refused by a limit names it and says by how much to raise it")
    func memoryMessages() {
        let limited = ResourceError.notEnoughMemory(
            model: "Tiny", neededBytes: 120 * mebibyte, availableBytes: 20 * mebibyte, peakTensor: "model.norm.weight",
            limit: .addressSpace)
        #expect(
            limited.description
                == "converting 'Tiny' needs about 120.0 MiB of memory (at its peak, while 'model.norm.weight' is "
                + "compressed) but the address-space limit of this process (ulimit -v) leaves it 20.0 MiB; raise the "
                + "limit by 100.0 MiB or more")
        #expect(limited.exitStatus == .resourceLimit)
        let machine = ResourceError.notEnoughMemory(
            model: "Tiny", neededBytes: 120 * mebibyte, availableBytes: 20 * mebibyte, peakTensor: "model.norm.weight")
        #expect(
            machine.description
                == "converting 'Tiny' needs about 120.0 MiB of memory (at its peak, while 'model.norm.weight' is "
                + "compressed) but 20.0 MiB is available; close other programs or export on a machine with more memory")
        let compile = ResourceError.notEnoughMemoryFor(
            .compile(bundle: "Tiny", devices: 2), neededBytes: 97 * mebibyte, availableBytes: 15 * mebibyte,
            limit: .data)
        #expect(
            compile.description
                == "compiling 'Tiny' for 2 devices needs about 97.0 MiB of memory but the data limit of this process "
                + "(ulimit -d) leaves it 15.0 MiB; raise the limit by 82.0 MiB or more")
        #expect(
            ResourceError.notEnoughMemoryFor(
                .compile(bundle: "Tiny", devices: nil), neededBytes: 97 * mebibyte, availableBytes: 15 * mebibyte,
                limit: nil
            ).description
                == "compiling 'Tiny' needs about 97.0 MiB of memory but 15.0 MiB is available; close other programs "
                + "or run it on a machine with more memory")
        #expect(
            ResourceError.notEnoughMemoryFor(
                .package(bundle: "Tiny.aimodel"), neededBytes: 81 * mebibyte, availableBytes: 15 * mebibyte,
                limit: .addressSpace
            ).description
                == "converting 'Tiny.aimodel' to a Core ML package needs about 81.0 MiB of memory but the "
                + "address-space limit of this process (ulimit -v) leaves it 15.0 MiB; raise the limit by 66.0 MiB or "
                + "more")
        #expect(
            ResourceError.notEnoughMemoryFor(
                .farm, neededBytes: 48 * mebibyte, availableBytes: 0, limit: .addressSpace
            ).description
                == "the farm process itself (its jobs run in processes of their own) needs about 48.0 MiB of memory "
                + "but the address-space limit of this process (ulimit -v) leaves it 0 B; raise the limit by 48.0 MiB "
                + "or more")
    }

    @Test("the compile's and the conversion's forecasts: fixed, per further device, per byte of manifest")
    func compileForecast() {
        #expect(MLPackageWriter.memoryForecast(manifestBytes: 0) == 80 * mebibyte)
        #expect(MLPackageWriter.memoryForecast(manifestBytes: 1000) == 80 * mebibyte + 24_000)
        #expect(Compiler.memoryForecast(manifestBytes: 0, devices: 1) == 64 * mebibyte)
        #expect(Compiler.memoryForecast(manifestBytes: 1000, devices: 3) == 128 * mebibyte + 16_000)
        #expect(Compiler.memoryForecast(manifestBytes: Int.max / 2, devices: 1) == Int.max)
    }
}
