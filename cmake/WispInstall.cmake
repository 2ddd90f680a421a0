# Install rules and the Debian package (docs/install.md).
#
#   cmake --install <build> --prefix <prefix>     (or DESTDIR=... for staging)
#   cpack --config <build>/CPackConfig.cmake      (wisp_<version>_<arch>.deb)
#
# wisp's libibverbs.so.1 and librdmacm.so.1 carry rdma-core's sonames, so
# they go to a private folder, <libdir>/wisp, that the dynamic loader
# never searches by itself: installing wisp, even to /usr, cannot shadow
# the system's rdma-core. wisp-run (bin/) finds them there; a program
# linked with -L and -rpath to it uses them always. Nothing is installed
# into the system library path, and no ld.so configuration is touched.
#
# Every destination is relative to the prefix, so the prefix given at
# install time (cmake --install --prefix, CPack's /usr) holds: wisp-run
# looks for the libraries relative to itself, and wisp.pc is written with
# the prefix of the install run.

include(GNUInstallDirs)

set(WISP_INSTALL_PRIVLIBDIR ${CMAKE_INSTALL_LIBDIR}/wisp)

# The drop-in libraries, with the symbolic links the build makes (soname
# and the unversioned name, which -lrdmacm finds under -L<libdir>/wisp).
# librdmacm.so.1 needs libibverbs.so.1: $ORIGIN makes it take wisp's, next
# to it, even when a program loads it without LD_LIBRARY_PATH.
foreach(tgt wisp_ibverbs wisp_rdmacm)
  if(TARGET ${tgt})
    install(TARGETS ${tgt}
      LIBRARY DESTINATION ${WISP_INSTALL_PRIVLIBDIR} COMPONENT runtime)
  endif()
endforeach()
if(TARGET wisp_rdmacm)
  set_target_properties(wisp_rdmacm PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()

# wisp-run, with the library folder relative to the installed script
# written into it (scripts/wisp-run: wisp_installed_libdir).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_BINDIR}")
  set(WISP_RUN_LIBDIR ${CMAKE_INSTALL_FULL_LIBDIR}/wisp)
else()
  file(RELATIVE_PATH WISP_RUN_LIBDIR
    /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${WISP_INSTALL_PRIVLIBDIR})
endif()
file(READ ${PROJECT_SOURCE_DIR}/scripts/wisp-run WISP_RUN_TEXT)
string(REPLACE "\nwisp_installed_libdir=\"\"\n"
  "\nwisp_installed_libdir=\"${WISP_RUN_LIBDIR}\"\n"
  WISP_RUN_INSTALLED "${WISP_RUN_TEXT}")
if(WISP_RUN_INSTALLED STREQUAL WISP_RUN_TEXT)
  message(FATAL_ERROR "scripts/wisp-run: no line wisp_installed_libdir=\"\" to set")
endif()
# Written verbatim (no @VAR@ substitution), and only when it changed so
# that a re-configure does not make it look new to the install step.
set(WISP_RUN_OLD "")
if(EXISTS ${PROJECT_BINARY_DIR}/install/wisp-run)
  file(READ ${PROJECT_BINARY_DIR}/install/wisp-run WISP_RUN_OLD)
endif()
if(NOT WISP_RUN_OLD STREQUAL WISP_RUN_INSTALLED)
  file(WRITE ${PROJECT_BINARY_DIR}/install/wisp-run "${WISP_RUN_INSTALLED}")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/scripts/wisp-run)
install(PROGRAMS ${PROJECT_BINARY_DIR}/install/wisp-run
  DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS wisp-stat RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT runtime)

# The header of wisp's rdma_set_option level, and wisp.pc. The .pc is
# written at install time so that it names the prefix actually installed
# to (CMAKE_INSTALL_PREFIX of the install run, not of the configure run).
install(FILES ${PROJECT_SOURCE_DIR}/verbs-provider/rdmacm/wisp_rdmacm.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wisp COMPONENT runtime)
# Each folder as wisp.pc names it: relative ones under ${prefix}.
foreach(d INCLUDEDIR LIBDIR BINDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(WISP_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(WISP_PC_${d} "\\\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
install(CODE "
  set(WISP_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(WISP_PC_INCLUDEDIR \"${WISP_PC_INCLUDEDIR}\")
  set(WISP_PC_LIBDIR \"${WISP_PC_LIBDIR}\")
  set(WISP_PC_BINDIR \"${WISP_PC_BINDIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/wisp.pc.in\"
    \"${PROJECT_BINARY_DIR}/install/wisp.pc\" @ONLY)
" COMPONENT runtime)
install(FILES ${PROJECT_BINARY_DIR}/install/wisp.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT runtime)

# Man pages, gzipped as Debian wants them (man reads either).
find_program(WISP_GZIP gzip)
set(WISP_MAN_PAGES man/wisp.7 man/wisp-run.1 man/wisp-stat.1)
set(WISP_MAN_OUT "")
foreach(page ${WISP_MAN_PAGES})
  get_filename_component(name ${page} NAME)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${name})
  if(WISP_GZIP)
    set(out ${PROJECT_BINARY_DIR}/install/man/${name}.gz)
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/install/man
      COMMAND ${WISP_GZIP} -9nc ${PROJECT_SOURCE_DIR}/${page} > ${out}
      DEPENDS ${PROJECT_SOURCE_DIR}/${page}
      COMMENT "Compressing ${page}")
  else()
    set(out ${PROJECT_SOURCE_DIR}/${page})
  endif()
  list(APPEND WISP_MAN_OUT ${out})
  install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
    COMPONENT runtime)
endforeach()
add_custom_target(wisp_man ALL DEPENDS ${WISP_MAN_OUT})

install(FILES README.md docs/configuration.md docs/install.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
# Debian policy 12.5: the licence as share/doc/<package>/copyright.
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR}
  RENAME copyright COMPONENT runtime)

# The Debian package: wisp_<version>_<arch>.deb, installed under /usr next
# to Debian's rdma-core (libibverbs1, librdmacm1, ibverbs-providers) with
# no file in common. Its runtime dependencies come from dpkg-shlibdeps.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME wisp)
set(CPACK_PACKAGE_VENDOR wisp)
set(CPACK_PACKAGE_CONTACT "wisp <wisp@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "iWARP in user space over TCP, with drop-in libibverbs and librdmacm")
set(CPACK_PACKAGE_DESCRIPTION
"wisp implements iWARP (RDMAP, RFC 5040; DDP, RFC 5041; MPA, RFC 5044 and
RFC 6581) in user space over ordinary TCP sockets driven by io_uring. Its
drop-in libibverbs.so.1 and librdmacm.so.1 let unmodified verbs and rdma_cm
programs run over plain Ethernet with no RDMA NIC, no kernel module and no
privileges; it interoperates with the Linux kernel's soft-iWARP (siw).
.
The libraries are installed in a private folder and never replace
rdma-core's: run a program over wisp with wisp-run(1). See wisp(7).")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# librdmacm.so.1 needs libibverbs.so.1: dpkg-shlibdeps follows its
# $ORIGIN RUNPATH to wisp's own in the package, so Debian's libibverbs1
# is no dependency.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "rdmacm-utils, ibverbs-utils, perftest")
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
set(CPACK_WISP_CONFIGURED_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/WispCPack.cmake)
include(CPack)
