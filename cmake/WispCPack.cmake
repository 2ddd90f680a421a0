# Read by cpack (CPACK_PROJECT_CONFIG_FILE) before it builds a package.
#
# The .deb installs under /usr, but the folders inside the prefix were
# chosen when the build was configured (GNUInstallDirs): only a build
# configured with -DCMAKE_INSTALL_PREFIX=/usr gets Debian's multiarch
# layout (/usr/lib/<triplet>/wisp), which also keeps the package free of
# maintainer scripts, so that removing it leaves nothing behind.
if(CPACK_GENERATOR STREQUAL "DEB" AND
   NOT CPACK_WISP_CONFIGURED_PREFIX STREQUAL CPACK_PACKAGING_INSTALL_PREFIX)
  message(WARNING
    "this build is configured for ${CPACK_WISP_CONFIGURED_PREFIX}, the package "
    "installs to ${CPACK_PACKAGING_INSTALL_PREFIX}: for Debian's layout build "
    "the package from a build configured with "
    "-DCMAKE_INSTALL_PREFIX=${CPACK_PACKAGING_INSTALL_PREFIX} (docs/install.md)")
endif()
