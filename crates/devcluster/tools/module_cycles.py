#!/usr/bin/env python3
"""The module graph of devcluster's src/: for each top-level module, the sibling modules its
files name as `crate::x`; prints the largest strongly connected component (modules that all
reach each other; or that no module is in a cycle), each member's in/out edges within it, and
the layers of the condensed graph.

    python3 crates/devcluster/tools/module_cycles.py            # every use, unit tests included
    python3 crates/devcluster/tools/module_cycles.py notests    # code before the first #[cfg(test)]
"""
import os,re,sys,collections
root=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','src')
mods=set()
files=collections.defaultdict(list)
for f in os.listdir(root):
    p=os.path.join(root,f)
    if f in('lib.rs','main.rs','bin'):continue
    if f.endswith('.rs'): m=f[:-3]; mods.add(m); files[m].append(p)
    elif os.path.isdir(p):
        mods.add(f)
        for dp,_,fs in os.walk(p):
            for x in fs:
                if x.endswith('.rs'): files[f].append(os.path.join(dp,x))
edges=collections.defaultdict(set)
for m,fs in files.items():
    for p in fs:
        src=open(p).read()
        # strip tests modules? keep everything but count separately
        if len(sys.argv)>1 and sys.argv[1]=='notests':
            i=src.find('#[cfg(test)]')
            if i>=0: src=src[:i]
        for t in re.findall(r'crate::([a-z_0-9]+)',src):
            if t in mods and t!=m: edges[m].add(t)
        # use crate::{a, b::c}
        for g in re.findall(r'crate::\{([^}]*)\}',src,re.S):
            for t in re.findall(r'(?:^|[,{\s])([a-z_0-9]+)',g):
                if t in mods and t!=m: edges[m].add(t)
# tarjan
idx={};low={};st=[];on=set();sccs=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        s=[]
        while True:
            w=st.pop();on.discard(w);s.append(w)
            if w==v:break
        sccs.append(s)
for v in sorted(mods):
    if v not in idx: sc(v)
sccs.sort(key=lambda s:(-len(s),sorted(s)))
big=set(sccs[0]) if len(sccs[0])>1 else set()
print('modules',len(mods),'largest SCC',len(sccs[0]))
print(sorted(big) if big else 'no module is in a cycle')
print('others nontrivial', [s for s in sccs[1:] if len(s)>1])
indeg=collections.Counter()
for m in big:
    for t in edges[m]&big: indeg[t]+=1
for m in sorted(big,key=lambda m:(len(edges[m]&big),-indeg[m])):
    print(f'{m:12} out={len(edges[m]&big):2} in={indeg[m]:2} uses {sorted(edges[m]&big)}')
# levels of condensation
comp={}
for i,s in enumerate(sccs):
    for m in s: comp[m]=i
level={}
def lv(i):
    if i in level: return level[i]
    deps={comp[t] for m in sccs[i] for t in edges[m] if comp[t]!=i}
    level[i]=1+max([lv(d) for d in deps],default=-1)
    return level[i]
for i in range(len(sccs)): lv(i)
by=collections.defaultdict(list)
for i,s in enumerate(sccs): by[level[i]].append(','.join(sorted(s)) if len(s)>1 else s[0])
for k in sorted(by): print(k, sorted(by[k]) if len(by[k])<30 else len(by[k]))
