// A workload of a second runtime (node, whose V8 heap zpage leaves out
// but whose large Buffers land in regions): fills MiB of Buffers with
// compressible, position-dependent text, keeps a digest of each, reads them
// back in a shuffled order, writes some to a file and reads them back into
// other Buffers (system calls on evicted pages), and prints one digest of
// everything. Usage: node node-buffers.js MIB
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');
const mib = parseInt(process.argv[2] || '256', 10);
const CHUNK = 4 << 20;
const chunks = [];
const digests = [];
const words = ['alpha', 'beta', 'gamma', 'delta', 'memory', 'page', 'compress', 'zram'];
for (let c = 0; c < (mib << 20) / CHUNK; c++) {
  const b = Buffer.allocUnsafe(CHUNK);
  let off = 0, i = 0;
  while (off < CHUNK) {
    off += b.write(`${words[(c * 7 + i) % words.length]} ${c}:${i} `, off);
    i++;
  }
  chunks.push(b);
  digests.push(crypto.createHash('sha256').update(b).digest('hex'));
}
let seed = 12345;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
let wrong = 0;
for (let pass = 0; pass < 2; pass++) {
  for (let k = 0; k < chunks.length; k++) {
    const c = Math.floor(rand() * chunks.length);
    if (crypto.createHash('sha256').update(chunks[c]).digest('hex') !== digests[c]) wrong++;
  }
}
const file = path.join(os.tmpdir(), `zpage-node-${process.pid}`);
const fd = fs.openSync(file, 'w+');
// The first `copies` Buffers go to the file and come back into the last
// ones (disjoint halves).
const copies = Math.min(16, Math.floor(chunks.length / 2));
for (let c = 0; c < copies; c++) fs.writeSync(fd, chunks[c], 0, CHUNK, c * CHUNK);
for (let c = 0; c < copies; c++) {
  const into = chunks[chunks.length - 1 - c];
  fs.readSync(fd, into, 0, CHUNK, c * CHUNK);
  if (!into.equals(chunks[c])) wrong++;
  digests[chunks.length - 1 - c] = digests[c];
}
fs.closeSync(fd);
fs.unlinkSync(file);
for (let c = 0; c < chunks.length; c++) {
  if (crypto.createHash('sha256').update(chunks[c]).digest('hex') !== digests[c]) wrong++;
}
const all = crypto.createHash('sha256');
for (const d of digests) all.update(d);
console.log(`chunks ${chunks.length} wrong ${wrong} digest ${all.digest('hex')}`);
process.exit(wrong ? 1 : 0);
