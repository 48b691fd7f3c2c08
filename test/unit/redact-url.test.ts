import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, redactUrl, redactUrls } from '#lib/log.ts';

describe('redactUrl', () => {
  it('hides the userinfo and keeps the rest of the link as written', () => {
    expect(redactUrl('http://feeduser:FEEDPASS@127.0.0.1:4151/private.xml')).toBe(
      'http://***@127.0.0.1:4151/private.xml',
    );
    expect(redactUrl('https://user@Shop.Example/a%20b.jpg')).toBe('https://***@Shop.Example/a%20b.jpg');
    // The last @ ends the userinfo: a password may hold an unescaped one
    expect(redactUrl('https://u:p@ss@cdn.example/a.jpg')).toBe('https://***@cdn.example/a.jpg');
    // An @ in the path or query is no userinfo
    expect(redactUrl('https://cdn.example/@me/a.jpg?by=a@b')).toBe('https://cdn.example/@me/a.jpg?by=a@b');
  });

  it('hides the values of credential parameters, whatever their case, and keeps the others', () => {
    expect(
      redactUrl(
        'https://b.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2024&' +
          'X-Amz-Date=20240101T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=TOK&X-Amz-SignedHeaders=host&' +
          'X-Amz-Signature=IMGSECRETSIG',
      ),
    ).toBe(
      'https://b.s3.amazonaws.com/a.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***&' +
        'X-Amz-Date=20240101T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=***&X-Amz-SignedHeaders=host&' +
        'X-Amz-Signature=***',
    );
    expect(
      redactUrl('https://x.blob.core.windows.net/c/a.jpg?sv=2022-11-02&se=2030-01-01&sp=r&sig=AB%2BC%3D'),
    ).toBe('https://x.blob.core.windows.net/c/a.jpg?sv=2022-11-02&se=2030-01-01&sp=r&sig=***');
    expect(redactUrl('https://d1.cloudfront.net/a.jpg?Policy=eyJ&Signature=abc~&Key-Pair-Id=K2')).toBe(
      'https://d1.cloudfront.net/a.jpg?Policy=***&Signature=***&Key-Pair-Id=***',
    );
    expect(
      redactUrl('https://storage.googleapis.com/b/a.jpg?X-Goog-Credential=sa&X-Goog-Signature=0f&w=2'),
    ).toBe('https://storage.googleapis.com/b/a.jpg?X-Goog-Credential=***&X-Goog-Signature=***&w=2');
    expect(
      redactUrl('https://f.example/feed.xml?TOKEN=1&access_token=2&Auth=3&key=4&apiKey=5&api_key=6&secret=7'),
    ).toBe(
      'https://f.example/feed.xml?TOKEN=***&access_token=***&Auth=***&key=***&apiKey=***&api_key=***&secret=***',
    );
    expect(redactUrl('https://f.example/feed.xml?password=p&client_secret=s&size=large&monkey=1')).toBe(
      'https://f.example/feed.xml?password=***&client_secret=***&size=large&monkey=1',
    );
  });

  it('hides each value of a repeated parameter, and one whose name is percent-encoded', () => {
    expect(redactUrl('https://f.example/a?token=1&x=2&token=3&token')).toBe(
      'https://f.example/a?token=***&x=2&token=***&token',
    );
    expect(redactUrl('https://f.example/a?X%2DAmz%2DSignature=abc&api+key=k&%zz=1')).toBe(
      'https://f.example/a?X%2DAmz%2DSignature=***&api+key=***&%zz=1',
    );
    // A value holding "=" (base64) is hidden whole
    expect(redactUrl('https://f.example/a?sig=ab==&b=1')).toBe('https://f.example/a?sig=***&b=1');
  });

  it('keeps a fragment, hiding a credential it carries (an OAuth redirect)', () => {
    expect(redactUrl('https://f.example/a.jpg?token=t#top')).toBe('https://f.example/a.jpg?token=***#top');
    expect(redactUrl('https://f.example/cb#access_token=t&state=s')).toBe(
      'https://f.example/cb#access_token=***&state=s',
    );
    // A "?" after the "#" starts no query: the fragment is kept as written
    expect(redactUrl('https://f.example/a#x?y=1&z')).toBe('https://f.example/a#x?y=1&z');
  });

  it('leaves a link without credentials, and text that is no absolute URL, as it is', () => {
    for (const text of [
      'https://cdn.example/a.jpg',
      'https://cdn.example',
      'https://cdn.example/a.jpg?',
      'https://cdn.example/a.jpg?w=100&h=2#frag',
      '/img/a.jpg?token=t',
      'user:pass@host/a.jpg',
      'not a url',
      '',
    ])
      expect(redactUrl(text)).toBe(text);
  });
});

describe('redactUrls', () => {
  it('redacts every link a message quotes, keeping the punctuation after it', () => {
    expect(
      redactUrls('image_link http://127.0.0.1:4151/img1.jpg?X-Amz-Signature=IMGSECRETSIG: HTTP 404.'),
    ).toBe('image_link http://127.0.0.1:4151/img1.jpg?X-Amz-Signature=***: HTTP 404.');
    expect(
      redactUrls(
        "Not one of the file's 2 valid products could be imported. The first error, row 1 (id a): image_link " +
          'http://imguser:IMGPASS@127.0.0.1:4151/img2.jpg: HTTP 404. (see HTTPS://u:p@x.example/b?sig=s).',
      ),
    ).toBe(
      "Not one of the file's 2 valid products could be imported. The first error, row 1 (id a): image_link " +
        'http://***@127.0.0.1:4151/img2.jpg: HTTP 404. (see HTTPS://***@x.example/b?sig=***).',
    );
    // A quoted value that is no URL (a space in the host) still loses its userinfo
    expect(redactUrls('image_link "http://u:p@ho st/a.jpg" is not a URL.')).toBe(
      'image_link "http://***@ho st/a.jpg" is not a URL.',
    );
  });

  it('leaves text without links, and redacted text, as it is', () => {
    for (const text of ['Duplicate id; row 1 was imported.', 'price "12 USD" is not a price.', ''])
      expect(redactUrls(text)).toBe(text);
    const once = redactUrls('image_link https://u:p@cdn.example/a.jpg?token=t: HTTP 404.');
    expect(redactUrls(once)).toBe(once);
  });
});

describe('createLogger', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('writes the links in a line redacted, in its message and fields, nested ones included', () => {
    const written: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    createLogger('info')
      .child({ feed: 'https://u:p@shop.example/feed.xml' })
      .error('import crashed: https://f.example/a?token=t', {
        error: 'GET http://imguser:IMGPASS@127.0.0.1:4151/img2.jpg failed',
        nested: { links: ['https://cdn.example/a.jpg?X-Amz-Signature=s'] },
        count: 3,
      });
    const line = JSON.parse(written.join(''));
    expect(line).toMatchObject({
      level: 'error',
      message: 'import crashed: https://f.example/a?token=***',
      feed: 'https://***@shop.example/feed.xml',
      error: 'GET http://***@127.0.0.1:4151/img2.jpg failed',
      nested: { links: ['https://cdn.example/a.jpg?X-Amz-Signature=***'] },
      count: 3,
    });
    expect(written.join('')).not.toMatch(/IMGPASS|:p@|=t\b|=s"/);
  });

  it("keeps a line's own message, level and time over fields of those names, which it writes prefixed", () => {
    // Prepare
    const written: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    // Act
    createLogger('info')
      .child({ level: 'debug' })
      .warn('import finished', { message: 'HTTP 403', time: 'then', status: 'failed' });
    // Assess
    const line = JSON.parse(written.join(''));
    expect(line).toMatchObject({
      level: 'warn',
      message: 'import finished',
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      field_level: 'debug',
      field_message: 'HTTP 403',
      field_time: 'then',
      status: 'failed',
    });
    expect(Object.keys(line).slice(0, 3)).toEqual(['level', 'time', 'message']);
  });

  it('writes a field named like an inherited property of an object (constructor, toString) as it is', () => {
    // Prepare
    const written: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    // A parsed object's own __proto__ key, which an assignment would take for the prototype.
    const fields = JSON.parse('{"constructor":"Product","toString":"x","hasOwnProperty":1,"__proto__":"p"}');
    // Act
    createLogger('info').info('feed parsed', fields as Record<string, unknown>);
    // Assess
    const line = JSON.parse(written.join(''));
    expect(line).toMatchObject({ constructor: 'Product', toString: 'x', hasOwnProperty: 1 });
    expect(written.join('')).toContain('"__proto__":"p"');
    expect(Object.keys(line).filter((key) => key.startsWith('field_'))).toEqual([]);
  });
});
