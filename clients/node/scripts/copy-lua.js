'use strict';
// prepack: copy the protocol's scripts, the repository's lua/*.lua byte for
// byte, into the package (lua/), so the tarball npm pack makes carries them,
// and check them as the client loads them (each must say it is the
// protocol the client speaks, PROTOCOL_VERSION: a tarball of one and the
// scripts of another would fail in every service that installs it);
// postpack (--clean) removes the copy again: the scripts are kept once, in
// the repository's lua/.
const fs = require('fs');
const path = require('path');
const { SCRIPTS, PROTOCOL_VERSION, loadScripts } = require('..');

const src = path.join(__dirname, '..', '..', '..', 'lua');
const dest = path.join(__dirname, '..', 'lua');

if (process.argv.includes('--clean')) {
  fs.rmSync(dest, { recursive: true, force: true });
  process.exit(0);
}
const missing = SCRIPTS.filter((s) => !fs.existsSync(path.join(src, `${s}.lua`)));
if (missing.length) {
  console.error(`rwlock: cannot pack: the protocol's scripts (${missing.join(', ')}.lua) are not in ${src}. ` +
    'Pack this package inside the rwlock repository (clients/node), whose lua/ holds them.');
  process.exit(1);
}
fs.mkdirSync(dest, { recursive: true });
for (const s of SCRIPTS) fs.copyFileSync(path.join(src, `${s}.lua`), path.join(dest, `${s}.lua`));
try {
  loadScripts(dest);
} catch (e) {
  fs.rmSync(dest, { recursive: true, force: true });
  console.error(`rwlock: cannot pack: this client speaks protocol ${PROTOCOL_VERSION}: ${e.message}`);
  process.exit(1);
}
