import { domainToASCII } from 'node:url';
import type { Plan } from '#lib/config.ts';

/** A customer catalogue. Search ids (API keys) are bound to exactly one feed. */
export interface Feed {
  feedId: string;
  name: string;
  plan: Plan;
  /** Custom hourly request limit (enterprise plans). */
  hourlyLimit?: number;
  /** Hostnames (exact or `*.example.com`) whose pages may call the API; empty = any origin. */
  domains: string[];
  /** Refuse requests that carry neither Origin nor Referer (server-to-server calls). */
  requireOrigin: boolean;
  createdAt: string;
  updatedAt: string;
  /**
   * Set when a deletion of the feed starts: the feed then counts as gone for every use case except the
   * deletion itself (which a retry finishes), and nothing can be created in it meanwhile.
   */
  deletingAt?: string;
}

export const PLANS = ['free', 'pro', 'enterprise'] as const satisfies readonly Plan[];

/** The hourly request limit that applies to a feed's search ids. */
export function hourlyLimitOf(
  feed: Pick<Feed, 'plan' | 'hourlyLimit'>,
  planLimits: Record<Plan, number>,
): number {
  if (feed.plan === 'enterprise' && feed.hourlyLimit !== undefined) return feed.hourlyLimit;
  return planLimits[feed.plan];
}

export { DOMAIN_PATTERN } from '#lib/domain/domain-pattern.ts';

/**
 * The host a domain entry names, as typed (trimmed, lower case): without an http(s) scheme and a lone `/`
 * after the host (a page's `location.origin`, or its address bar, pasted as the entry: the check is by
 * host), a port (an Origin's port is not compared) or a trailing dot, and a leading `*.` apart. `text` is
 * the entry without the scheme and `/`.
 */
export function typedHost(entry: string): { text: string; wildcard: boolean; host: string } {
  const text = entry
    .trim()
    .toLowerCase()
    .replace(/^(?:https?:\/\/)?([^/]*)\/?$/, '$1');
  const wildcard = text.startsWith('*.');
  const host = (wildcard ? text.slice(2) : text).replace(/:\d{1,5}$/, '').replace(/\.$/, '');
  return { text, wildcard, host };
}

/**
 * A domain entry as the Origin check compares it: its typed host (typedHost) in the form browsers send in
 * Origin, an internationalised name in ASCII (punycode), `*.` kept. Text that is no hostname is returned
 * trimmed and lower-cased, for DOMAIN_PATTERN to refuse.
 */
export function canonicalDomain(entry: string): string {
  const { text, wildcard, host } = typedHost(entry);
  if (!host || /[/:@?#\s]/.test(host)) return text;
  const ascii = domainToASCII(host);
  return ascii ? `${wildcard ? '*.' : ''}${ascii}` : text;
}

/**
 * Whether a browser's URL parser reads a canonical entry as this hostname at all. One whose last label is
 * a number is read as an IPv4 address, and `shop.123`, `999.1.1.1` or `1.2.3.4.5` are none: no page has
 * such an Origin, so the entry would never match. (Nor is an `xn--` label that is not valid punycode.)
 */
export function browserReadsHost(canonical: string): boolean {
  return domainToASCII(canonical.replace(/^\*\./, '')) !== '';
}

/** True when `host` is allowed by one of the feed's domain entries (`*.shop.com` also admits shop.com's subdomains only). */
export function hostAllowed(host: string, domains: readonly string[]): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  return domains.some((entry) => {
    if (entry.startsWith('*.')) return h.endsWith(entry.slice(1)) && h.length > entry.length - 1;
    return h === entry;
  });
}
