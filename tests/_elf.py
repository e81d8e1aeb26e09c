"""A minimal 64-bit ELF file, shaped like a cubin, for the kernel-cache tests."""

from __future__ import annotations


def elf_binary(kernel_name: str) -> bytes:
    """A small whole 64-bit ELF file holding `kernel_name`: the header, one
    section with the name, and the section table (a null entry and that
    section) at the end, where a cubin has it."""
    body = kernel_name.encode().ljust(64, b"\0")
    table = 64 + len(body)
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    header[0x10:0x14] = (2).to_bytes(2, "little") + (190).to_bytes(2, "little")
    header[0x28:0x30] = table.to_bytes(8, "little")
    header[0x34:0x36] = (64).to_bytes(2, "little")
    header[0x3A:0x3E] = (64).to_bytes(2, "little") + (2).to_bytes(2, "little")
    section = bytearray(64)
    section[4:8] = (1).to_bytes(4, "little")  # SHT_PROGBITS
    section[24:40] = (64).to_bytes(8, "little") + len(body).to_bytes(8, "little")
    return bytes(header) + body + bytes(64) + bytes(section)
