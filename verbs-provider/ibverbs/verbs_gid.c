/* SPDX-License-Identifier: MIT */
/*
 * verbs_gid.c - wisp0's GID table, derived from the host's interfaces.
 *
 * siw binds one device to one netdev and reports that netdev's MAC,
 * zero-padded to 16 octets, as its only GID. wisp0 runs over every
 * interface the host routes through, so it reports one such GID per
 * interface that has a MAC, ordered by ifindex; GID 0 (the first such
 * interface) also gives the node GUID.
 */
#include "verbs_abi.h"
#include "wisp_verbs.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAC_LEN 6

static bool mac_is_zero(const uint8_t *mac)
{
	static const uint8_t zero[MAC_LEN];

	return memcmp(mac, zero, MAC_LEN) == 0;
}

static int cmp_ifindex(const void *a, const void *b)
{
	const struct wisp_gid *x = a, *y = b;

	return (x->ifindex > y->ifindex) - (x->ifindex < y->ifindex);
}

/*
 * No interface with a MAC (a network namespace with only lo, say): make
 * one up from the host name so that the GID, the node GUID and whatever a
 * peer keys on them stay the same from one run to the next. FNV-1a, then
 * the locally administered bit set and the group bit cleared (IEEE 802
 * section 8.2).
 */
static void gid_from_hostname(union ibv_gid *gid)
{
	char name[256] = "";
	uint64_t h = 0xcbf29ce484222325ull;

	if (gethostname(name, sizeof(name) - 1) != 0)
		strcpy(name, "localhost");
	for (const char *p = name; *p; p++) {
		h ^= (uint8_t)*p;
		h *= 0x100000001b3ull;
	}
	memset(gid, 0, sizeof(*gid));
	for (int i = 0; i < MAC_LEN; i++)
		gid->raw[i] = (uint8_t)(h >> (8 * i));
	gid->raw[0] = (uint8_t)((gid->raw[0] & ~0x01u) | 0x02u);
}

/* Does this getifaddrs() entry give a usable MAC? Link-layer (AF_PACKET)
 * entries only, one per interface; loopback and MAC-less links (tun,
 * ipip) carry none. */
static const struct sockaddr_ll *if_mac(const struct ifaddrs *ifa)
{
	const struct sockaddr_ll *sll;

	if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_PACKET)
		return NULL;
	if (ifa->ifa_flags & IFF_LOOPBACK)
		return NULL;
	sll = (const struct sockaddr_ll *)(const void *)ifa->ifa_addr;
	if (sll->sll_halen != MAC_LEN || mac_is_zero(sll->sll_addr))
		return NULL;
	return sll;
}

int wisp_gid_table_scan(struct wisp_gid **tbl)
{
	struct ifaddrs *ifas = NULL;
	struct wisp_gid *t;
	int n = 0;

	/* Without getifaddrs (no memory, no netlink) the host-name GID
	 * still makes a usable device. */
	if (getifaddrs(&ifas) != 0)
		ifas = NULL;
	for (const struct ifaddrs *ifa = ifas; ifa; ifa = ifa->ifa_next)
		if (if_mac(ifa) && n < WISP_MAX_GIDS)
			n++;

	t = calloc(n ? (size_t)n : 1, sizeof(*t));
	if (!t) {
		freeifaddrs(ifas);
		return -ENOMEM;
	}
	n = 0;
	for (const struct ifaddrs *ifa = ifas; ifa; ifa = ifa->ifa_next) {
		const struct sockaddr_ll *sll = if_mac(ifa);

		if (!sll || n == WISP_MAX_GIDS)
			continue;
		memcpy(t[n].gid.raw, sll->sll_addr, MAC_LEN);
		t[n].ifindex = (uint32_t)sll->sll_ifindex;
		n++;
	}
	freeifaddrs(ifas);

	if (n == 0) {
		gid_from_hostname(&t[0].gid);
		t[0].ifindex = 0;
		n = 1;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_ifindex);
	*tbl = t;
	return n;
}

__be64 wisp_gid_to_guid(const union ibv_gid *gid)
{
	const uint8_t *mac = gid->raw;
	uint8_t eui[8] = {
		/* RFC 4291 appendix A: invert the universal/local bit and
		 * put FF:FE between the OUI and the NIC part. */
		(uint8_t)(mac[0] ^ 0x02u), mac[1], mac[2], 0xff, 0xfe,
		mac[3], mac[4], mac[5],
	};
	__be64 guid;

	memcpy(&guid, eui, sizeof(guid));
	return guid;
}
