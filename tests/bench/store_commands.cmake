# The store-command benchmark: built with the rest so that it keeps
# compiling; run tests/bench/store_commands.sh for the figures (that script
# also counts allocations, which needs a build without sanitizers).
add_executable(store_commands store_commands.c)
target_link_libraries(store_commands PRIVATE rls_core rl_testsupport)
rl_warnings(store_commands)
