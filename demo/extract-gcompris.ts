/**
 * Rebuilds demo/images from Debian's gcompris-qt-data package (run once; the output is committed):
 *
 *   apt-get download gcompris-qt-data && dpkg -x gcompris-qt-data_*.deb /tmp/gcompris
 *   npx tsx demo/extract-gcompris.ts /tmp/gcompris
 *
 * The photos live in a Qt resource archive (categorization.rcc). Only files that Debian's copyright file
 * marks public-domain or CC0-1.0 are written; the rest of the archive (CC-BY, CC-BY-SA, GPL) is skipped.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { inflateSync } from 'node:zlib';

interface RccFile {
  path: string;
  data: Buffer;
}

/** Walks a Qt .rcc archive (format versions 1–3) and returns every file with its full path. */
export function readRcc(archive: Buffer): RccFile[] {
  if (archive.toString('latin1', 0, 4) !== 'qres') throw new Error('not a Qt resource archive');
  const version = archive.readUInt32BE(4);
  const treeOffset = archive.readUInt32BE(8);
  const dataOffset = archive.readUInt32BE(12);
  const namesOffset = archive.readUInt32BE(16);
  const nodeSize = version >= 2 ? 22 : 14;
  const nameAt = (offset: number) => {
    const at = namesOffset + offset;
    const length = archive.readUInt16BE(at);
    const chars: string[] = [];
    for (let i = 0; i < length; i += 1) chars.push(String.fromCharCode(archive.readUInt16BE(at + 6 + i * 2)));
    return chars.join('');
  };
  const files: RccFile[] = [];
  const walk = (node: number, prefix: string) => {
    const at = treeOffset + node * nodeSize;
    const name = node === 0 ? '' : nameAt(archive.readUInt32BE(at));
    const flags = archive.readUInt16BE(at + 4);
    const path = prefix ? `${prefix}/${name}` : name;
    if (flags & 0x02) {
      const count = archive.readUInt32BE(at + 6);
      const first = archive.readUInt32BE(at + 10);
      for (let i = 0; i < count; i += 1) walk(first + i, path);
      return;
    }
    const offset = dataOffset + archive.readUInt32BE(at + 10);
    const size = archive.readUInt32BE(offset);
    let data = archive.subarray(offset + 4, offset + 4 + size);
    // Compressed entries carry a 4-byte uncompressed length before the zlib stream.
    if (flags & 0x01) data = inflateSync(data.subarray(4));
    if (flags & 0x04) throw new Error(`${path}: zstd-compressed entries are not supported`);
    files.push({ path, data: Buffer.from(data) });
  };
  walk(0, '');
  return files;
}

interface Licence {
  licence: string;
  copyright: string;
  source: string;
}

/** Licence stanzas of Debian's machine-readable copyright file, keyed by the file name after images/. */
function categorizationLicences(copyright: string): Map<string, Licence> {
  const out = new Map<string, Licence>();
  for (const stanza of copyright.split(/\n\s*\n/)) {
    const files = /^Files:\s*src\/activities\/categorization\/resource\/images\/(\S+)$/m.exec(stanza)?.[1];
    if (!files) continue;
    out.set(files, {
      licence: /^License:\s*(.+)$/m.exec(stanza)?.[1]?.trim() ?? '',
      copyright: /^Copyright:\s*(.+)$/m.exec(stanza)?.[1]?.trim() ?? '',
      source: /^Comment:\s*(\S+)/m.exec(stanza)?.[1]?.trim() ?? '',
    });
  }
  return out;
}

const FREE = new Set(['public-domain', 'CC0-1.0']);

async function main(root: string) {
  const archive = await readFile(join(root, 'usr/share/gcompris-qt/rcc/categorization.rcc'));
  const licences = categorizationLicences(
    await readFile(join(root, 'usr/share/doc/gcompris-qt-data/copyright'), 'utf8'),
  );
  const outDir = new URL('./images/', import.meta.url).pathname;
  await mkdir(outDir, { recursive: true });
  const rows: string[] = [];
  for (const file of readRcc(archive)) {
    // The archive holds WebP re-encodings of the photos the copyright file lists as .jpg/.png.
    const match = /images\/([a-z]+\/[^/.]+)\.(webp|jpg|png)$/.exec(file.path);
    if (!match) continue;
    const stem = match[1]!;
    const licence = [...licences].find(([listed]) => listed.replace(/\.\w+$/, '') === stem)?.[1];
    if (!licence || !FREE.has(licence.licence)) continue;
    const name = `${stem.replace('/', '-')}.${match[2]}`;
    await writeFile(join(outDir, name), file.data);
    rows.push(`| ${name} | ${licence.licence} | ${licence.copyright} | ${licence.source} |`);
  }
  rows.sort();
  process.stdout.write(`${rows.join('\n')}\n${rows.length} images written to ${outDir}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv[2] ?? '/tmp/gcompris');
}
