import { describe, expect, it } from 'vitest';
import { CreateFeedRequest, CreateKeyRequest } from '#lib/domain/admin/schemas.ts';
import { feedVersion } from '#lib/domain/admin/feeds.ts';
import { DOMAIN_PATTERN, hostAllowed, hourlyLimitOf } from '#lib/domain/feeds.ts';

const limits = { free: 100, pro: 1000, enterprise: 5000 };

describe('hostAllowed', () => {
  it('matches exact hosts case-insensitively', () => {
    expect(hostAllowed('Shop.Example.com', ['shop.example.com'])).toBe(true);
    expect(hostAllowed('example.com', ['shop.example.com'])).toBe(false);
  });

  it('matches a host written with the root dot (a page at https://shop.example.com./ sends it)', () => {
    expect(hostAllowed('shop.example.com.', ['shop.example.com'])).toBe(true);
    expect(hostAllowed('a.example.com.', ['*.example.com'])).toBe(true);
  });

  it('matches subdomains of a wildcard entry but not the bare domain or look-alikes', () => {
    expect(hostAllowed('a.b.example.com', ['*.example.com'])).toBe(true);
    expect(hostAllowed('example.com', ['*.example.com'])).toBe(false);
    expect(hostAllowed('badexample.com', ['*.example.com'])).toBe(false);
    expect(hostAllowed('example.com.evil.net', ['*.example.com'])).toBe(false);
  });
});

describe('DOMAIN_PATTERN', () => {
  it.each(['shop.example.com', '*.example.com', 'localhost', 'xn--bcher-kva.example'])('accepts %s', (d) => {
    expect(DOMAIN_PATTERN.test(d)).toBe(true);
  });
  it.each(['https://shop.example.com', 'shop.example.com/', '*.', 'a..b', 'shop.example.com:8080', '-a.com'])(
    'rejects %s',
    (d) => {
      expect(DOMAIN_PATTERN.test(d)).toBe(false);
    },
  );
});

describe('feed domains as the admin API takes them', () => {
  const domainsOf = (domains: string[]) => CreateFeedRequest.safeParse({ name: 'Shop', domains });

  it('keeps them as the Origin check compares them: punycode, no port, no trailing dot, lower case', () => {
    const parsed = domainsOf([
      'Bücher.de',
      '*.Bücher.example',
      'shop.example.com:8080',
      'shop.example.com.',
      ' localhost ',
      // A page's origin (location.origin) or its address pasted: the host is the entry
      'https://Shop.example.com',
      'http://shop.example.com:8080/',
      // Or typed with the slash an address bar shows
      'shop.example.com/',
    ]);
    expect(parsed.data?.domains).toEqual([
      'xn--bcher-kva.de',
      '*.xn--bcher-kva.example',
      'shop.example.com',
      'shop.example.com',
      'localhost',
      'shop.example.com',
      'shop.example.com',
      'shop.example.com',
    ]);
    // A browser on the IDN sends its punycode Origin, which the stored entry now admits
    expect(hostAllowed(new URL('https://bücher.de').hostname, parsed.data!.domains)).toBe(true);
  });

  it.each([
    '*.com',
    'com.*',
    'https://shop.example.com/cart',
    'ftp://shop.example.com',
    'https://user@shop.example.com',
    'https://',
    '/',
    'shop.example.com//',
    'shop example.com',
    'a..b',
    'user@shop.com',
    '*.',
  ])('refuses %j', (entry) => {
    expect(domainsOf([entry]).success).toBe(false);
  });

  it.each([
    ['1', /^is read as an IP address \(0\.0\.0\.1\)/],
    ['0x10', /^is read as an IP address \(0\.0\.0\.16\)/],
    ['010', /^is read as an IP address \(0\.0\.0\.8\)/],
    ['127.1', /^is read as an IP address \(127\.0\.0\.1\)/],
    ['192.000.002.010', /^is read as an IP address \(192\.0\.2\.8\)/],
    // With a scheme, port or wildcard, as without
    ['https://127.1', /^is read as an IP address \(127\.0\.0\.1\)/],
    ['http://010:8080/', /^is read as an IP address \(0\.0\.0\.8\)/],
    ['*.0x10', /^is read as an IP address \(0\.0\.0\.16\)/],
    ['a\u200bb.example', /invisible characters/],
  ])(
    'refuses %j, which a browser would read as another host (it was stored as that host)',
    (entry, message) => {
      const parsed = domainsOf([entry]);
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues[0]?.message).toMatch(message);
    },
  );

  it.each(['shop.123', '*.shop.123', '999.1.1.1', '1.2.3.4.5', 'shop.0x1f', 'xn--a.example'])(
    'refuses %j, which no browser reads as a hostname (it was stored and could never match)',
    (entry) => {
      const parsed = domainsOf([entry]);
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues[0]?.message).toMatch(/no hostname a browser sends/);
    },
  );

  it('names one problem of an entry the hostname pattern refuses (not also the browser parse)', () => {
    const parsed = domainsOf(['a\u200db.example']);
    expect(parsed.error?.issues.map((issue) => issue.message)).toEqual([
      'expected a hostname such as shop.example.com or *.example.com',
    ]);
  });

  it('keeps an IPv4 address written in full, and names with digits', () => {
    expect(
      domainsOf(['192.0.2.10', '192.0.2.10:8080', 'shop1.example', '2001.example']).data?.domains,
    ).toEqual(['192.0.2.10', '192.0.2.10', 'shop1.example', '2001.example']);
  });

  it('keeps an IPv4 address written in full with a scheme, as the bare address (it was refused as one)', () => {
    const parsed = domainsOf(['https://192.0.2.10', 'http://192.0.2.10:8080/', 'https://192.0.2.10.']);
    expect(parsed.error?.issues).toBeUndefined();
    expect(parsed.data?.domains).toEqual(['192.0.2.10', '192.0.2.10', '192.0.2.10']);
  });

  it.each(['*.co.uk', '*.CO.UK', '*.github.io', '*.s3.amazonaws.com', '*.рф', '*.local'])(
    'refuses the wildcard %j over a public suffix (every site under it; *.co.uk was accepted)',
    (entry) => {
      const parsed = domainsOf([entry]);
      expect(parsed.success).toBe(false);
      expect(parsed.error?.issues[0]?.message).toMatch(/public suffix/);
    },
  );

  it.each(['*.shop.co.uk', '*.me.github.io', '*.internal.corp', '*.example.com', 'co.uk'])(
    'accepts %j: one site and its subdomains, or an exact host',
    (entry) => {
      expect(domainsOf([entry]).success).toBe(true);
    },
  );
});

describe('names as the admin API takes them', () => {
  it.each([
    'a\u0000b',
    'tab\tname',
    'shop\u202egpj.exe',
    'x\u2066y',
    'bell\u0007',
    'rtl\u200fmark',
    'zero\u200bwidth',
    'line\u2028break',
    'mid\ufeffbom',
  ])('refuses %j', (text) => {
    expect(CreateFeedRequest.safeParse({ name: text }).success).toBe(false);
    expect(CreateKeyRequest.safeParse({ name: text }).success).toBe(false);
  });

  it.each(['Ünïcødé shop', 'متجر', '店 🛒', 'family 👩\u200d👩\u200d👧', 'می\u200cخواهم'])(
    'accepts %j',
    (text) => {
      expect(CreateFeedRequest.safeParse({ name: text }).success).toBe(true);
      expect(CreateKeyRequest.safeParse({ name: text }).success).toBe(true);
    },
  );
});

describe('hourlyLimitOf', () => {
  it('uses the plan limit, or the custom limit of an enterprise feed', () => {
    expect(hourlyLimitOf({ plan: 'free' }, limits)).toBe(100);
    expect(hourlyLimitOf({ plan: 'pro', hourlyLimit: 7 }, limits)).toBe(1000);
    expect(hourlyLimitOf({ plan: 'enterprise' }, limits)).toBe(5000);
    expect(hourlyLimitOf({ plan: 'enterprise', hourlyLimit: 7 }, limits)).toBe(7);
  });
});

describe('feedVersion', () => {
  const feed = { feedId: 'f', createdAt: '2026-11-27T00:00:00.000Z', updatedAt: '2026-11-27T00:00:01.000Z' };
  it('changes with the limit in force, which follows the configured plan limits without a write', () => {
    expect(feedVersion({ ...feed, hourlyLimit: 100 })).not.toBe(feedVersion({ ...feed, hourlyLimit: 500 }));
    expect(feedVersion({ ...feed, hourlyLimit: 100 })).toBe(feedVersion({ ...feed, hourlyLimit: 100 }));
    expect(feedVersion({ ...feed, hourlyLimit: 100 })).toMatch(/^"[\w-]{27}"$/);
  });
});
