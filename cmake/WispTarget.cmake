# Compile options shared by every wisp target, applied per target (never
# globally) so that third-party code is not built with our warning set.

# rdma-core's warning list.
set(WISP_WARNINGS
  -Wall -Wextra
  -Wmissing-prototypes -Wmissing-declarations
  -Wwrite-strings -Wformat=2 -Wshadow
  -Wstrict-prototypes -Wold-style-definition)

set(WISP_SAN_FLAGS "")
if(WISP_ASAN)
  list(APPEND WISP_SAN_FLAGS -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
endif()
if(WISP_TSAN)
  list(APPEND WISP_SAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
endif()
if(WISP_FUZZ)
  # Every library object carries coverage so libFuzzer can see into it.
  list(APPEND WISP_SAN_FLAGS -fsanitize=fuzzer-no-link,address,undefined
       -fno-omit-frame-pointer)
endif()
if(WISP_COVERAGE)
  list(APPEND WISP_SAN_FLAGS --coverage)
endif()

# wisp_target(<target>): warnings, -Werror, sanitizers, include root.
function(wisp_target tgt)
  target_compile_options(${tgt} PRIVATE ${WISP_WARNINGS} ${WISP_SAN_FLAGS})
  if(WISP_WERROR)
    target_compile_options(${tgt} PRIVATE -Werror)
  endif()
  target_compile_definitions(${tgt} PRIVATE _GNU_SOURCE)
  target_link_options(${tgt} PRIVATE ${WISP_SAN_FLAGS})
endfunction()
