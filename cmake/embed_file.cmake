# Turn a text file into a C source defining `const char NAME[]` (NUL-terminated), byte for byte.
# Usage: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_file.cmake
file(READ "${IN}" _hex HEX)
string(LENGTH "${_hex}" _len)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" _bytes "${_bytes}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\nconst char ${NAME}[] = {\n${_bytes}0x00};\n")
