import { z } from 'zod';
import { parse as parseHost } from 'tldts';
import { browserReadsHost, canonicalDomain, DOMAIN_PATTERN, PLANS, typedHost } from '#lib/domain/feeds.ts';
import { hasHiddenCharacters, hasLoneSurrogate } from '#lib/domain/validation.ts';

/** Request schemas of the admin API (DESIGN §4). Strict: a typo in an admin call is an error, not a no-op. */

const shownText = (max: number) =>
  z
    .string()
    .trim()
    .min(1)
    .max(max)
    // A lone surrogate is half a character: stored, it came back as an escape no client can show.
    .refine((text) => !hasLoneSurrogate(text), 'a lone surrogate (half of a UTF-16 pair) is not text')
    .refine(
      (text) => !hasHiddenCharacters(text),
      'control and bidirectional-override characters are not allowed',
    );
/**
 * A wildcard over a public suffix (`*.com`, `*.co.uk`, `*.github.io`: names under which anyone can
 * register a site, from the Public Suffix List that tldts bundles, private suffixes included) would admit
 * every site under it. A single unknown label (`*.local`) counts as one too.
 */
export function wildcardTooWide(entry: string): boolean {
  if (!entry.startsWith('*.')) return false;
  return parseHost(entry.slice(2), { allowPrivateDomains: true }).domain === null;
}

/**
 * The IPv4 address a browser reads an entry's host as, when the host is written as a number or in an IPv4
 * shorthand (`1`, `0x10`, `010`, `127.1`, `192.000.002.010`) rather than as that address; undefined
 * otherwise. An address written as its four numbers is a host like any other, with a scheme, port or
 * trailing dot too (`https://192.0.2.10:8443/` is kept as `192.0.2.10`): it is compared as typedHost
 * leaves it, as canonicalDomain keeps it (`https://192.0.2.10`, compared with its scheme, was refused).
 */
function ipShorthand(entry: string): string | undefined {
  const address = canonicalDomain(entry).replace(/^\*\./, '');
  if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(address)) return undefined;
  return typedHost(entry).host === address ? undefined : address;
}

const name = shownText(200).describe('Display name of the feed.');
const plan = z.enum(PLANS).describe('free (100 requests/hour), pro (1,000) or enterprise (hourlyLimit).');
/**
 * One feed domain entry, to its canonical form: what the admin API stores, and what a usage context's
 * domain must be to be metered (lib/domain/admin/usage.ts).
 */
export const domainEntry = z
  .string()
  // Checked as sent, before the canonical form: browsers' host parsing reads "1" or "010" as the IPv4
  // address 0.0.0.1 or 0.0.0.8 and drops a zero-width space, so the entry stored was not the one typed.
  .refine((entry) => !hasHiddenCharacters(entry), 'invisible characters are not part of a hostname')
  .refine((entry) => ipShorthand(entry) === undefined, {
    error: (issue) =>
      `is read as an IP address (${ipShorthand(String(issue.input))}): write one as its four numbers, such as 192.0.2.10`,
  })
  .overwrite(canonicalDomain)
  .regex(DOMAIN_PATTERN, 'expected a hostname such as shop.example.com or *.example.com')
  // (Only a pattern-shaped entry: one the pattern refused has that message alone.)
  .refine(
    (entry) => !DOMAIN_PATTERN.test(entry) || browserReadsHost(entry),
    'is no hostname a browser sends: a last label of digits is read as an IPv4 address (write one as four numbers up to 255), and an xn-- label must be valid punycode',
  )
  .refine(
    (entry) => !wildcardTooWide(entry),
    'a wildcard covers one site: *.example.com, not every site under a public suffix such as *.com, *.co.uk or *.github.io',
  )
  .describe(
    'A hostname (shop.example.com), or *. and one for its subdomains (*.example.com). Stored as the host ' +
      'alone in lower-case ASCII: a scheme, port, trailing dot or lone / is dropped and an internationalised ' +
      'name becomes punycode (https://shop.example.com:8443 is kept as shop.example.com, bücher.example as ' +
      'xn--bcher-kva.example). An IPv4 address is written as its four numbers (192.0.2.10).',
  );
const domains = z
  .array(domainEntry)
  .max(100)
  .describe('Hostnames allowed as Origin/Referer; exact or *.example.com. Empty allows any origin.');
const hourlyLimit = z
  .number()
  .int()
  .min(1)
  .max(10_000_000)
  .describe('Requests per rolling hour (enterprise only).');
const requireOrigin = z.boolean().describe('Refuse requests that carry neither Origin nor Referer.');

const enterpriseOnly = (value: { plan?: string; hourlyLimit?: number }) =>
  value.hourlyLimit === undefined || value.plan === 'enterprise';
const enterpriseIssue = { message: 'hourlyLimit applies to the enterprise plan only', path: ['hourlyLimit'] };

export const CreateFeedRequest = z
  .strictObject({
    feedId: z
      .string()
      .regex(/^[a-z0-9][a-z0-9_-]{2,63}$/, 'expected 3-64 characters: a-z, 0-9, _ and -')
      .optional()
      .describe('Optional id; generated when absent.'),
    name,
    plan: plan.default('free'),
    domains: domains.default([]),
    hourlyLimit: hourlyLimit.optional(),
    requireOrigin: requireOrigin.default(false),
  })
  .refine(enterpriseOnly, enterpriseIssue);
export type CreateFeedRequest = z.infer<typeof CreateFeedRequest>;

export const UpdateFeedRequest = z
  .strictObject({
    name: name.optional(),
    plan: plan.optional(),
    domains: domains.optional(),
    hourlyLimit: hourlyLimit.nullable().optional().describe('null removes a custom limit.'),
    requireOrigin: requireOrigin.optional(),
  })
  .refine((value) => Object.keys(value).length > 0, 'send at least one field to change');
export type UpdateFeedRequest = z.infer<typeof UpdateFeedRequest>;

export const CreateKeyRequest = z.strictObject({
  name: shownText(100).default('default').describe('Label shown in the dashboard.'),
});
export type CreateKeyRequest = z.infer<typeof CreateKeyRequest>;

const day = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'expected YYYY-MM-DD')
  .refine((value) => {
    const date = new Date(`${value}T00:00:00Z`);
    return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === value;
  }, 'not a day of the calendar');
export const UsageQuery = z.strictObject({ from: day.optional(), to: day.optional() });
export type UsageQuery = z.infer<typeof UsageQuery>;
