/* SPDX-License-Identifier: MIT */
/*
 * verbs_gid.c - wisp0's GID table, derived from the host's interfaces.
 *
 * siw binds one device to one netdev and reports that netdev's MAC,
 * zero-padded to 16 octets, as its only GID. That leaves the interface
 * identifier (octets 8-15) zero, and rdma-core's ibv_devinfo and Python
 * tests skip such a GID as an empty slot: a program looking for a GID
 * finds none. wisp0 gives each interface the IPv6 link-local form of its
 * MAC instead, fe80::<modified EUI-64> (RFC 4291 section 2.5.6 and
 * appendix A), the address the kernel itself derives from that MAC: still
 * derived from the interface, one-to-one with the MAC, and never null.
 * iWARP puts no GID on the wire, so peers are unaffected.
 *
 * wisp0 runs over every interface the host routes through, so it reports
 * one such GID per interface that has a MAC, ordered by ifindex; GID 0
 * (the first such interface) also gives the node GUID, its EUI-64.
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

/* gid = fe80::<modified EUI-64 of mac>: RFC 4291 appendix A inverts the
 * universal/local bit and puts FF:FE between the OUI and the NIC part. */
static void gid_from_mac(union ibv_gid *gid, const uint8_t *mac)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[0] = 0xfe;
	gid->raw[1] = 0x80;
	gid->raw[8] = (uint8_t)(mac[0] ^ 0x02u);
	gid->raw[9] = mac[1];
	gid->raw[10] = mac[2];
	gid->raw[11] = 0xff;
	gid->raw[12] = 0xfe;
	gid->raw[13] = mac[3];
	gid->raw[14] = mac[4];
	gid->raw[15] = mac[5];
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
	uint8_t mac[MAC_LEN];

	if (gethostname(name, sizeof(name) - 1) != 0)
		strcpy(name, "localhost");
	for (const char *p = name; *p; p++) {
		h ^= (uint8_t)*p;
		h *= 0x100000001b3ull;
	}
	for (int i = 0; i < MAC_LEN; i++)
		mac[i] = (uint8_t)(h >> (8 * i));
	mac[0] = (uint8_t)((mac[0] & ~0x01u) | 0x02u);
	gid_from_mac(gid, mac);
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
		gid_from_mac(&t[n].gid, sll->sll_addr);
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
	__be64 guid;

	/* The interface identifier is the EUI-64 already. */
	memcpy(&guid, gid->raw + 8, sizeof(guid));
	return guid;
}
