// mailcheck-golden.js runs the real mailcheck.js (npm mailcheck, pinned in package.json) over a
// fixed list of domains — correct ones and typos — and writes its answers to
// internal/verify/signals/testdata/golden.json. The Go port (internal/verify/signals/mailcheck.go)
// must agree on every case; `make data` regenerates the file. The list is built
// deterministically so that a regeneration changes the file only when mailcheck changes.
'use strict';

const fs = require('fs');
const path = require('path');
const Mailcheck = require('mailcheck');

const version = require('mailcheck/package.json').version;

// Domains people really use, including all of mailcheck's defaults and second-level names.
const correct = [
  ...Mailcheck.defaultDomains,
  'yahoo.com', 'yahoo.co.uk', 'yahoo.fr', 'yahoo.de', 'hotmail.com', 'hotmail.co.uk', 'hotmail.fr',
  'live.com', 'live.fr', 'outlook.com', 'outlook.de', 'mail.com', 'mail.ru', 'gmx.de', 'gmx.net',
  'gmx.com', 'yandex.ru', 'protonmail.com', 'proton.me', 'pm.me', 'tuta.io', 'tutanota.com',
  'hey.com', 'fastmail.com', 'zoho.com', '163.com', '126.com', 'naver.com', 'daum.net',
  'orange.fr', 'free.fr', 'laposte.net', 't-online.de', 'libero.it', 'virgilio.it', 'seznam.cz',
  'wp.pl', 'o2.pl', 'interia.pl', 'rediffmail.com', 'uol.com.br', 'bol.com.br', 'terra.com.br',
  'example.com', 'example.org', 'mailvet.io', 'acme-corp.com', 'university.edu', 'city.gov',
  'shop.co.uk', 'startup.io', 'agency.de', 'bank.ch', 'news.net', 'company.com.au',
];

// Typos of common domains: every deletion, adjacent swap and doubled letter of the second-level
// label, and hand-picked top-level typos.
const bases = ['gmail.com', 'yahoo.com', 'hotmail.com', 'outlook.com', 'aol.com', 'icloud.com',
  'comcast.net', 'live.com', 'msn.com', 'sbcglobal.net', 'verizon.net', 'googlemail.com'];

function typosOf(domain) {
  const dot = domain.indexOf('.');
  const sld = domain.slice(0, dot);
  const rest = domain.slice(dot);
  const out = [];
  for (let i = 0; i < sld.length; i++) {
    out.push(sld.slice(0, i) + sld.slice(i + 1) + rest); // deletion
    out.push(sld.slice(0, i + 1) + sld[i] + sld.slice(i + 1) + rest); // doubled letter
    if (i + 1 < sld.length) {
      out.push(sld.slice(0, i) + sld[i + 1] + sld[i] + sld.slice(i + 2) + rest); // swap
    }
  }
  return out;
}

const tldTypos = ['gmail.con', 'gmail.cmo', 'gmail.co', 'gmail.om', 'gmail.comm', 'gmail.cm',
  'gmail.ocm', 'gmail.vom', 'gmail.xom', 'gmail.net', 'gmail.org', 'gmail.de', 'gmail.c',
  'yahoo.con', 'yahoo.co.uj', 'yahoo.co.ik', 'yahoo.cm', 'yahoo.fe', 'yahoo.frr',
  'hotmail.con', 'hotmail.co.uj', 'hotmail.cm', 'hotmail.ocm', 'hotmail.de', 'hotmail.it',
  'outlook.con', 'outlook.cmo', 'aol.con', 'comcast.nt', 'comcast.ner', 'comcast.nte',
  'verizon.ner', 'att.nte', 'sbcglobal.nt', 'example.con', 'example.cmo', 'example.ogr',
  'example.nte', 'company.co.ukk', 'company.cpm', 'shop.co.ul', 'mail.ri', 'gmx.dr',
  'hotmali.com', 'hotmal.com', 'hotmaill.com', 'hotnail.com', 'homail.com', 'yahooo.com',
  'yaoo.com', 'yhoo.com', 'gmai.com', 'gamil.com', 'gnail.com', 'gmaill.com', 'gmal.com',
  'gmail.comcom', 'gmailcom', 'gmail', 'yahoocom', 'hotmailcom', 'mac.con', 'me.con',
  'icloud.con', 'iclod.com', 'iclould.com', 'outlok.com', 'outloo.com', 'otlook.com',
  'live.con', 'liv.com', 'lve.com', 'msn.con', 'mns.com', 'qq.con', 'qq.co', 'sky.con',
  'web.dr', 'web.ed', 'gmx.ddd', 'a.b.c', 'x.y', 'co.uk', 'com', 'net', 'localhost',
  'sub.gmail.com', 'mail.gmial.com', 'gmail.com.br', 'googlemail.con', 'gogglemail.com',
  'rocketmail.con', 'rockemail.com', 'ymail.con', 'ymial.com', 'btinternet.con',
  'btinternt.com', 'charter.nte', 'shaw.cz', 'shaw.ca.ca', 'telus.nt', 'rogers.con',
  'optonline.nte', 'optusnet.com.ua', 'xtra.co.nx', 'earthlink.nte', 'cox.nte', 'aim.con',
  'bellsouth.nte', 'sympatico.cs', '1gmail.com', 'gmail1.com', 'g-mail.com', 'gmail-.com'];

const inputs = [];
const seen = new Set();
for (const d of [...correct, ...bases.flatMap(typosOf), ...tldTypos]) {
  if (!seen.has(d)) {
    seen.add(d);
    inputs.push(d);
  }
}

const cases = inputs.map((domain) => {
  const r = Mailcheck.run({ email: 'someone@' + domain });
  return { domain, suggestion: r ? r.domain : '' };
});

const out = path.join(__dirname, '..', 'internal', 'verify', 'signals', 'testdata', 'golden.json');
fs.mkdirSync(path.dirname(out), { recursive: true });
// One case a line keeps the file readable and its diffs small.
const body = cases.map((c) => '  ' + JSON.stringify(c)).join(',\n');
fs.writeFileSync(out, `{\n "mailcheck": ${JSON.stringify(version)},\n "cases": [\n${body}\n ]\n}\n`);
const suggested = cases.filter((c) => c.suggestion !== '').length;
console.log(`${path.relative(process.cwd(), out)}: ${cases.length} cases, ${suggested} with a suggestion`);
