// node build.mjs OUT [SRC]: bundles the playground and the console of SRC
// (default: this file's folder) with esbuild into OUT:
// OUT/index.html, OUT/console.html and OUT/ui/<name>-<hash>.{js,css}. The
// HTML names the hashed files (so the server may let browsers cache them for
// good); no source maps, no remote anything. web/README.md.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

const here = path.resolve(process.argv[3] || path.dirname(fileURLToPath(import.meta.url)));
const out = path.resolve(process.argv[2] || path.join(here, 'dist'));
// The packages npm installed (the current directory's, else this file's).
const nodePaths = [path.join(process.cwd(), 'node_modules'),
  path.join(path.dirname(fileURLToPath(import.meta.url)), 'node_modules')];
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(path.join(out, 'ui'), { recursive: true });

const result = await esbuild.build({
  entryPoints: { playground: path.join(here, 'src/playground.js'), console: path.join(here, 'src/console.js') },
  bundle: true,
  nodePaths,
  minify: true,
  format: 'esm',
  target: ['chrome100', 'firefox100', 'safari15'],
  outdir: path.join(out, 'ui'),
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning',
});

// {{playground.js}} -> playground-HASH.js in the pages.
const names = {};
for (const [file, info] of Object.entries(result.metafile.outputs)) {
  if (!info.entryPoint && !info.cssBundle && !file.endsWith('.css')) continue;
  const base = path.basename(file);
  const m = /^([a-z]+)-[A-Z0-9]+\.(js|css)$/.exec(base);
  if (m) names[`${m[1]}.${m[2]}`] = base;
}
for (const page of ['index.html', 'console.html']) {
  const html = fs.readFileSync(path.join(here, page), 'utf8').replace(/\{\{([a-z]+\.(?:js|css))\}\}/g, (_, n) => {
    if (!names[n]) throw new Error(`${page}: no bundle ${n} (have ${Object.keys(names).join(', ')})`);
    return names[n];
  });
  fs.writeFileSync(path.join(out, page), html);
}
for (const f of fs.readdirSync(path.join(out, 'ui'))) {
  console.log(`${f} ${fs.statSync(path.join(out, 'ui', f)).size}`);
}
