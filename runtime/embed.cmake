# Turns a text file into a comma-separated list of char literals.
file(READ ${IN} content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," content "${content}")
file(WRITE ${OUT} "${content}\n")
