"""The parts of an AMD code object (ELF64, e_machine 224) that a dispatch needs: the kernel's
code address and its kernel descriptor (`<name>.kd`, 64 bytes; LLVM AMDGPU usage, "Kernel
Descriptor" for code object v4/v5)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

EM_AMDGPU = 224


@dataclass
class KernelDescriptor:
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int

    # compute_pgm_rsrc2
    @property
    def user_sgpr_count(self) -> int:
        return (self.compute_pgm_rsrc2 >> 1) & 0x1F

    @property
    def enable_private_segment(self) -> bool:
        return bool(self.compute_pgm_rsrc2 & 1)

    @property
    def workgroup_id_enabled(self) -> tuple[bool, bool, bool]:
        return tuple(bool(self.compute_pgm_rsrc2 >> b & 1) for b in (7, 8, 9))  # type: ignore[return-value]

    @property
    def workgroup_info_enabled(self) -> bool:
        return bool(self.compute_pgm_rsrc2 >> 10 & 1)

    @property
    def vgpr_workitem_id(self) -> int:  # 0: x, 1: x and y, 2: x, y and z
        return (self.compute_pgm_rsrc2 >> 11) & 3

    # kernel_code_properties: which user SGPRs are set up, in this order
    USER_SGPRS = (("private_segment_buffer", 0, 4), ("dispatch_ptr", 1, 2), ("queue_ptr", 2, 2),
                  ("kernarg_segment_ptr", 3, 2), ("dispatch_id", 4, 2), ("flat_scratch_init", 5, 2),
                  ("private_segment_size", 6, 1))

    def user_sgpr_layout(self) -> list[tuple[str, int, int]]:
        """(name, first SGPR, count) of every enabled user SGPR, in the order the hardware loads them."""
        out, s = [], 0
        for name, bit, count in self.USER_SGPRS:
            if self.kernel_code_properties >> bit & 1:
                out.append((name, s, count))
                s += count
        return out

    @property
    def wave32(self) -> bool:
        return bool(self.kernel_code_properties >> 10 & 1)


def _u(fmt: str, b: bytes, off: int):
    return struct.unpack_from("<" + fmt, b, off)


class CodeObject:
    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError("not an ELF64 file")
        self.data = data
        (e_machine,) = _u("H", data, 18)
        if e_machine != EM_AMDGPU:
            raise ValueError(f"ELF machine {e_machine} is not AMDGPU")
        (self.e_flags,) = _u("I", data, 48)
        e_shoff, = _u("Q", data, 40)
        e_shentsize, e_shnum, e_shstrndx = _u("HHH", data, 58)
        self.sections = []
        for i in range(e_shnum):
            name, typ, flags, addr, off, size, link, info, align, entsize = _u("IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
            self.sections.append(dict(name_off=name, type=typ, addr=addr, offset=off, size=size, link=link, entsize=entsize))
        shstr = self.sections[e_shstrndx]
        for s in self.sections:
            s["name"] = self._cstr(shstr["offset"] + s["name_off"])
        self.symbols: dict[str, tuple[int, int, int]] = {}  # name -> (value, size, section index)
        for s in self.sections:
            if s["type"] != 2:  # SHT_SYMTAB
                continue
            strtab = self.sections[s["link"]]
            for j in range(s["size"] // 24):
                st_name, st_info, st_other, st_shndx, st_value, st_size = _u("IBBHQQ", data, s["offset"] + 24 * j)
                name = self._cstr(strtab["offset"] + st_name)
                if name:
                    self.symbols[name] = (st_value, st_size, st_shndx)

    def _cstr(self, off: int) -> str:
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode()

    def read_vaddr(self, vaddr: int, size: int) -> bytes:
        for s in self.sections:
            if s["type"] != 8 and s["addr"] <= vaddr and vaddr + size <= s["addr"] + s["size"] and s["addr"]:
                o = s["offset"] + vaddr - s["addr"]
                return self.data[o:o + size]
        raise ValueError(f"address {vaddr:#x} is in no loaded section")

    def kernel_descriptor(self, kernel: str) -> tuple[KernelDescriptor, int]:
        """The descriptor of `kernel` and the address of its first instruction."""
        if kernel + ".kd" not in self.symbols:
            raise ValueError(f"no kernel descriptor {kernel}.kd in the code object")
        kd_addr, _, _ = self.symbols[kernel + ".kd"]
        raw = self.read_vaddr(kd_addr, 64)
        gs, ps, ks = _u("III", raw, 0)
        (entry,) = _u("q", raw, 16)
        rsrc3, rsrc1, rsrc2 = _u("III", raw, 44)
        props, preload = _u("HH", raw, 56)
        kd = KernelDescriptor(gs, ps, ks, entry, rsrc3, rsrc1, rsrc2, props, preload)
        return kd, kd_addr + entry
