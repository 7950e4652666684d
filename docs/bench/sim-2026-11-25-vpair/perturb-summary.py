import sys, collections, statistics
def load(p):
    d=collections.defaultdict(dict)
    for l in open(p):
        f,s,r=l.split(); d[f.split('/')[-1].split('.')[0]][int(s)]=float(r)
    return d
a=load(sys.argv[1]); b=load(sys.argv[2])
print("%-26s %7s %7s %7s %7s  win/tie/loss  >1.03 a/b  >1.01 a/b" % ("trace","mean a","mean b","max a","max b"))
for t in a:
    xs=[a[t][s] for s in sorted(a[t])]; ys=[b[t][s] for s in sorted(a[t])]
    w=sum(y<x-1e-9 for x,y in zip(xs,ys)); l=sum(y>x+1e-9 for x,y in zip(xs,ys)); ti=len(xs)-w-l
    print("%-26s %.4f %.4f %.4f %.4f  %2d/%2d/%2d      %2d/%2d      %2d/%2d" % (t, statistics.mean(xs), statistics.mean(ys), max(xs), max(ys), w, ti, l, sum(x>1.03 for x in xs), sum(y>1.03 for y in ys), sum(x>1.01 for x in xs), sum(y>1.01 for y in ys)))
