"""Writes a C table of the CTS executables in the layout IREE's iree-c-embed-data makes.

    python3 embed_c.py OUT_DIR [IDENTIFIER] [BIN_DIR]

OUT_DIR/IDENTIFIER.h declares  const iree_file_toc_t* IDENTIFIER_create(void);
and  static inline size_t IDENTIFIER_size(void);  OUT_DIR/IDENTIFIER.c defines the
table: one {name, data, size} entry per BIN_DIR/*.bin, names being bare file names
("executable_test.bin", as iree-c-embed-data --flatten gives), then {NULL, NULL, 0}.
Each blob is 64-byte aligned (the ELF loader wants aligned data) and NUL-terminated
(the NUL is not counted in size). IDENTIFIER defaults to iree_cts_testdata_llvm_cpu,
BIN_DIR to the executables/ folder beside this script. Only the standard library is used.
"""
import os
import sys


def main():
    out_dir = sys.argv[1]
    ident = sys.argv[2] if len(sys.argv) > 2 else "iree_cts_testdata_llvm_cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    bin_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(here, "executables")
    names = sorted(n for n in os.listdir(bin_dir) if n.endswith(".bin"))
    toc_struct = (
        "#ifndef IREE_FILE_TOC\n#define IREE_FILE_TOC\n"
        "typedef struct iree_file_toc_t {\n"
        "  const char* name;  // the file's original name\n"
        "  const char* data;  // beginning of the file\n"
        "  size_t size;       // length of the file\n"
        "} iree_file_toc_t;\n#endif  // IREE_FILE_TOC\n"
    )
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, ident + ".h"), "w") as h:
        h.write("#pragma once\n#include <stddef.h>\n")
        h.write("#if __cplusplus\nextern \"C\" {\n#endif\n")
        h.write(toc_struct)
        h.write(f"const iree_file_toc_t* {ident}_create(void);\n")
        h.write(f"static inline size_t {ident}_size(void) {{ return {len(names)}; }}\n")
        h.write("#if __cplusplus\n}\n#endif\n")
    with open(os.path.join(out_dir, ident + ".c"), "w") as c:
        c.write("#include <stddef.h>\n#include <stdint.h>\n")
        c.write("#if defined(_MSC_VER)\n#define ALIGN64 __declspec(align(64))\n"
                "#else\n#define ALIGN64 _Alignas(64)\n#endif\n")
        c.write(toc_struct)
        for i, n in enumerate(names):
            data = open(os.path.join(bin_dir, n), "rb").read() + b"\0"
            c.write(f"ALIGN64 static const uint8_t file_{i}[] = {{\n")
            for off in range(0, len(data), 24):
                c.write(",".join(str(b) for b in data[off:off + 24]) + ",\n")
            c.write("};\n")
        c.write("static const iree_file_toc_t toc[] = {\n")
        for i, n in enumerate(names):
            c.write(f'  {{"{n}", (const char*)file_{i}, sizeof(file_{i}) - 1}},\n')
        c.write("  {NULL, NULL, 0},\n};\n")
        c.write(f"const iree_file_toc_t* {ident}_create(void) {{ return &toc[0]; }}\n")


if __name__ == "__main__":
    main()
